"""Process supervision shared by every runner: starting a child, how it ended, its log's tail, killing it.

Contract: `spawn(argv, **popen_kwargs)` starts every adapter and engine child: in a session of its
own (so `kill_group(proc)` reaches every process it started in its group), with
PR_SET_PDEATHSIG = SIGKILL on Linux (it dies when this process dies, SIGKILL included), and
watched by this process's orphan guard (`harness.orphan_guard`), which kills the child's whole
tree, descendants that called `setsid` included, once this process is gone or once
`kill_group(proc)` says the child is done. `describe_exit(code)` words an exit status as a user
reads it ("exited with code 3", "was killed by SIGKILL (killed: out of memory?)"); `tail(path)`
never raises.

NOTE: PR_SET_PDEATHSIG fires when the *thread* that started the child exits: spawn children from
a thread that outlives them (the main thread, as every runner here does).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Sequence

LOG_TAIL_LINES = 25


def tail(path: Path, n: int = LOG_TAIL_LINES) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-n:]) or "(log is empty)"


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (killed: out of memory?)" if -code == signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {code}"


PR_SET_PDEATHSIG = 1
GUARD_SCRIPT = Path(__file__).resolve().with_name("orphan_guard.py")


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


def spawn(argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
    """`subprocess.Popen(argv, **kwargs)` for a child that must not outlive this process (module doc).
    Raises what Popen raises (OSError for a missing binary)."""
    proc = subprocess.Popen(list(argv), start_new_session=True, preexec_fn=_die_with_parent, **kwargs)
    GUARD.tell("watch", proc.pid)
    return proc


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's whole process group (it leads one: start_new_session=True), and have the
    guard kill whatever of its tree left the group (setsid)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    GUARD.tell("release", proc.pid)


def argv_line(argv: Sequence[str]) -> str:
    """An argv as a shell would take it back (for logs a user may paste)."""
    return "$ " + shlex.join([str(a) for a in argv])
