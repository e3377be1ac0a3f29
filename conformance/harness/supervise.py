"""Process supervision shared by every runner: how a child ended, its log's tail, killing its group.

Contract: children are started in a session of their own (`start_new_session=True`), so
`kill_group(proc)` reaches every process they started; `describe_exit(code)` words an exit status
as a user reads it ("exited with code 3", "was killed by SIGKILL (killed: out of memory?)");
`tail(path)` never raises.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from pathlib import Path
from typing import Sequence

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


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's whole process group (it leads one: start_new_session=True)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def argv_line(argv: Sequence[str]) -> str:
    """An argv as a shell would take it back (for logs a user may paste)."""
    return "$ " + shlex.join([str(a) for a in argv])
