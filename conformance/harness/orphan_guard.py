"""The orphan guard: a small watcher process that kills a framework's children once it is gone.

Run as `python -I orphan_guard.py` with a pipe on stdin (standard library only, no package import).
Protocol, one line each: `watch <pid>` (a child just started: track it and its descendants),
`release <pid>` (the child is done: kill whatever of its tree is left, forget it). Every
`POLL_S` it records each watched child's descendants from /proc (pid and start time, so a reused
pid is never killed), which keeps a grandchild that left the child's process group with
`setsid` on the list even after it was re-parented to init. When stdin reaches end of file (the
parent exited, normally or by SIGKILL) it SIGKILLs every recorded process still alive and each
watched child's process group, then exits. A descendant that is started and calls setsid within
one poll of its parent's death would escape this polling alone; `supervise.spawn` runs every child
under a child subreaper (`harness.subreaper`), so such a descendant is re-parented to the watched
supervisor, not to init, and stays in the recorded tree.
"""

from __future__ import annotations

import os
import select
import signal
import sys

POLL_S = 0.25


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, start time in clock ticks) of a live pid, None when it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    if fields[0] == "Z":
        return None
    return int(fields[1]), int(fields[19])


def _table() -> dict[int, tuple[int, int]]:
    out = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                out[int(name)] = st
    return out


def _record(roots: dict[int, dict[int, int]]) -> None:
    if not roots:
        return
    table = _table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    for root, seen in roots.items():
        if root in table:
            seen.setdefault(root, table[root][1])
        todo = [p for p in list(seen) if p in table and table[p][1] == seen[p]]
        while todo:
            pid = todo.pop()
            for child in children.get(pid, ()):
                if child not in seen:
                    seen[child] = table[child][1]
                    todo.append(child)


def _kill(root: int, seen: dict[int, int]) -> None:
    try:
        os.killpg(root, signal.SIGKILL)
    except OSError:
        pass
    for pid, start in seen.items():
        st = _stat(pid)
        if st is not None and st[1] == start:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # a Ctrl-C meant for the parent is not ours
    roots: dict[int, dict[int, int]] = {}
    fd = sys.stdin.fileno()
    pending = b""
    while True:
        ready, _, _ = select.select([fd], [], [], POLL_S)
        if ready:
            data = os.read(fd, 4096)
            if not data:
                break
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                verb, _, arg = line.decode("ascii", "replace").partition(" ")
                if not arg.strip().isdigit():
                    continue
                pid = int(arg)
                if verb == "watch":
                    roots.setdefault(pid, {})
                    _record({pid: roots[pid]})
                elif verb == "release" and pid in roots:
                    _record({pid: roots[pid]})
                    _kill(pid, roots.pop(pid))
        _record(roots)
    _record(roots)
    for root, seen in roots.items():
        _kill(root, seen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
