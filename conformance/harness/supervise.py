"""Process supervision shared by every runner: starting a child, how it ended, its log's tail, killing it.

Contract: `spawn(argv, linger=False, **popen_kwargs)` starts every adapter and engine child under a
supervisor of its own (`harness.subreaper`, a child subreaper: whatever the child starts and
detaches, `setsid -f` or `nohup ... &`, stays in the supervisor's tree instead of escaping to
init), in a session of its own (so `kill_group(proc)` reaches every process it started in its
group), with PR_SET_PDEATHSIG = SIGKILL on Linux (it dies when this process dies, SIGKILL
included), and watched by this process's orphan guard (`harness.orphan_guard`), which kills the
whole tree once this process is gone or once `kill_group(proc)` says the child is done. The
returned Popen is the supervisor's; it ends as the child ends (same exit code or signal). Without
`linger` the supervisor kills what the child left running as soon as the child exits (a plan, a
version command); with it, it stays while any of the tree runs (a live server behind a launcher
that detaches it). A command that cannot be started raises OSError here, as Popen would.
`kill_group(proc)` freezes the supervisor, kills its whole tree, then its group. `describe_exit(code)` words an exit status as a user
reads it ("exited with code 3", "was killed by SIGKILL (killed: out of memory?)"); `tail(path)`
never raises and reads only the end of the file.

NOTE: PR_SET_PDEATHSIG fires when the *thread* that started the child exits: spawn children from
a thread that outlives them (the main thread, as every runner here does).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Sequence

LOG_TAIL_LINES = 25


TAIL_READ_BYTES = 1 << 18   # tail() reads at most the log's last 256 KiB, never the whole file
TAIL_LINE_CHARS = 2000      # and cuts each line it returns there


def tail(path: Path, n: int = LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - TAIL_READ_BYTES))
            lines = fh.read(TAIL_READ_BYTES).decode("utf-8", errors="replace").splitlines()
    except OSError:
        return "(no log)"
    lines = [line if len(line) <= TAIL_LINE_CHARS else line[:TAIL_LINE_CHARS] + " [line cut]" for line in lines[-n:]]
    return "\n".join(lines) or "(log is empty)"


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (killed: out of memory?)" if -code == signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {code}"


from conformance.harness.subreaper import descendants

PR_SET_PDEATHSIG = 1
GUARD_SCRIPT = Path(__file__).resolve().with_name("orphan_guard.py")
REAP_GRACE_S = 2.0   # kill_group: how long the supervisor has to reap its killed tree and end
SUBREAPER_SCRIPT = Path(__file__).resolve().with_name("subreaper.py")


def _load_prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()   # resolved here: the pre-exec hook below must not load anything


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: SIGKILL me when my parent goes."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class _Guard:
    """This process's orphan guard (started on first use, again after a fork or if it died)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._owner = 0

    def _ensure(self) -> subprocess.Popen | None:
        if self._proc is not None and self._owner == os.getpid() and self._proc.poll() is None:
            return self._proc
        try:
            self._proc = subprocess.Popen([sys.executable, "-I", str(GUARD_SCRIPT)], stdin=subprocess.PIPE,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True, close_fds=True)
            self._owner = os.getpid()
        except OSError:
            self._proc = None
        return self._proc

    def tell(self, verb: str, pid: int) -> None:
        with self._lock:
            for _ in range(2):
                guard = self._ensure()
                if guard is None or guard.stdin is None:
                    return
                try:
                    guard.stdin.write(f"{verb} {pid}\n".encode())
                    guard.stdin.flush()
                    return
                except OSError:
                    self._proc = None

    def pid(self) -> int | None:
        with self._lock:
            guard = self._ensure()
            return guard.pid if guard else None


GUARD = _Guard()


def _check_startable(program: str, env: Any, cwd: Any) -> None:
    """Raise the OSError Popen would raise for a program that cannot be run (the supervisor would
    only exit 127, and callers word a missing binary themselves)."""
    if os.sep in program:
        path = Path(program) if os.path.isabs(program) else Path(cwd or os.getcwd()) / program
        if not path.exists():
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
        if path.is_dir() or not os.access(path, os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
        return
    for folder in os.get_exec_path(env):
        candidate = Path(folder or ".") / program
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)


def spawn(argv: Sequence[str], linger: bool = False, **kwargs: Any) -> subprocess.Popen:
    """`subprocess.Popen(argv, **kwargs)` for a child that must not outlive this process, under a
    subreaper supervisor (module doc). Raises OSError for a command that cannot be started."""
    argv = [str(a) for a in argv]
    if not argv:
        raise FileNotFoundError(errno.ENOENT, "empty command", "")
    _check_startable(argv[0], kwargs.get("env"), kwargs.get("cwd"))
    wrapper = [sys.executable, "-I", str(SUBREAPER_SCRIPT), *(["--linger"] if linger else []), "--"]
    proc = subprocess.Popen(wrapper + argv, start_new_session=True, preexec_fn=_die_with_parent, **kwargs)
    GUARD.tell("watch", proc.pid)
    return proc


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's whole tree: the supervisor stopped first (so nothing is re-parented away
    from it meanwhile), every descendant (detached ones included: they are the subreaper's), then
    its process group; the guard then kills whatever it recorded that is left."""
    if proc.poll() is None:   # once reaped, its pid may be another process's: the supervisor cleaned up
        try:
            os.kill(proc.pid, signal.SIGSTOP)
        except (ProcessLookupError, PermissionError):
            pass
        for _ in range(3):
            for pid in descendants(proc.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        try:   # let it reap what died (no zombie left for an init that may not reap) and end
            os.kill(proc.pid, signal.SIGCONT)
            proc.wait(timeout=REAP_GRACE_S)
        except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    GUARD.tell("release", proc.pid)


def argv_line(argv: Sequence[str]) -> str:
    """An argv as a shell would take it back (for logs a user may paste)."""
    return "$ " + shlex.join([str(a) for a in argv])
