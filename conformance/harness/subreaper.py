"""The supervisor between the framework and every engine child: a child subreaper.

Run as `python -I subreaper.py [--linger] -- ARGV...` (standard library only, no package import;
`supervise.spawn` starts it). It makes itself a child subreaper (Linux prctl
PR_SET_CHILD_SUBREAPER), so a process that ARGV starts and that detaches (`setsid -f`, `nohup ...
&`, a double fork) is re-parented to it instead of to init: it stays in this process's tree,
where `supervise.kill_group` and the orphan guard find and kill it. It runs ARGV with the same
stdin, stdout, stderr and environment, dying with it (PR_SET_PDEATHSIG), then:

- without `--linger` (plans, version commands): once ARGV exits, every process left in its tree
  is killed (SIGKILL) and the supervisor ends as ARGV ended (same exit code, same signal);
- with `--linger` (live servers): once ARGV exits 0, it waits while anything of the tree still runs
  (a launcher that exits after detaching its server keeps the server watched), then ends as ARGV
  ended; ARGV failing (non-zero, a signal) ends it at once as without `--linger`.

SIGTERM, SIGINT and SIGHUP sent to it are passed on, once, to every process of its tree; the caller's SIGKILL of
the supervisor's group is followed by `supervise.kill_group`'s kill of the whole tree. Where
prctl is missing (not Linux) it still runs ARGV and passes signals; detached processes then
escape to init, as without it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import resource
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _prctl():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def descendants(root: int) -> list[int]:
    """Every live descendant of `root` from /proc, deepest last (never `root` itself)."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                text = fh.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(name))
    out: list[int] = []
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, ())
    return out


def _signal_tree(sig: int) -> None:
    for pid in descendants(os.getpid()):
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def _reap_all() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _end_as(status: int) -> None:
    """Exit as the child ended: its code, or its signal (default action restored)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))   # the child's crash, not a core of ours
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status))


def main(argv: list[str]) -> None:
    linger = False
    if argv and argv[0] == "--linger":
        linger, argv = True, argv[1:]
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        sys.stderr.write("subreaper: no command\n")
        os._exit(2)
    prctl = _prctl()
    if prctl is not None:
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    def die_with_me() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    for sig in FORWARDED:
        signal.signal(sig, lambda s, _f: _signal_tree(s))
    try:
        child = subprocess.Popen(argv, preexec_fn=die_with_me, close_fds=False)
    except OSError as exc:
        # the caller words this as it words a missing binary: exit 127, the reason on stderr
        sys.stderr.write(f"could not start {argv[0]!r}: {exc.strerror or exc}\n")
        os._exit(127)
    main_status: int | None = None
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        except OSError as exc:
            if exc.errno == errno.EINTR:
                continue
            raise
        if pid == child.pid:
            main_status = status
            child.returncode = 0   # reaped here: Popen must not wait for it again
            if not linger or not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
                break   # a launcher that exits 0 leaves its server watched; a failure ends everything
    if main_status is None:   # cannot happen (the child is ours), but end as a failure, never hang
        os._exit(70)
    for _ in range(3):        # a process forking while it is killed: go round again
        _signal_tree(signal.SIGKILL)
        _reap_all()
    _end_as(main_status)


if __name__ == "__main__":
    main(sys.argv[1:])
