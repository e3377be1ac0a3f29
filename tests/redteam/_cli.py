"""Run the real `conformance` command as a child process, measuring what an attack costs.

Contract: `cli(args, cwd, env, timeout_s)` runs `python -m conformance ARGS` and returns a `Ran`
(exit code, stdout, stderr, wall seconds, the child's peak RSS in MiB from wait4); past
`timeout_s` it kills the child and fails the calling test saying so.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conformance import paths

BOMB_LEVELS = 9


@dataclass(frozen=True)
class Ran:
    rc: int
    out: str
    err: str
    wall_s: float
    peak_mib: float


def project_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(paths.REPO_ROOT), DFLASH_CONFORMANCE_CACHE=str(tmp_path / "cache"))
    env.update(extra)
    return env


def cli(args: list[str], tmp_path: Path, timeout_s: float = 60, **extra_env: str) -> Ran:
    out_f, err_f = tmp_path / "cli.stdout", tmp_path / "cli.stderr"
    t0 = time.monotonic()
    with out_f.open("wb") as out, err_f.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "conformance", *args], stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, cwd=str(paths.REPO_ROOT), env=project_env(tmp_path, **extra_env))
        deadline = t0 + timeout_s
        hwm_kib = 0
        while True:
            hwm_kib = max(hwm_kib, _vm_hwm_kib(proc.pid))
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                pytest.fail(f"`conformance {' '.join(args)}` still running after {timeout_s} s (killed)")
            time.sleep(0.02)
    proc.returncode = os.waitstatus_to_exitcode(status)
    # NOTE: the child's own high-water mark, sampled while it runs: wait4's ru_maxrss starts from the RSS of
    # the process that forked it (a test worker grown large by earlier tests), not from the child's own
    return Ran(proc.returncode, out_f.read_text(errors="replace"), err_f.read_text(errors="replace"),
               time.monotonic() - t0, (hwm_kib or usage.ru_maxrss) / 1024)


def _vm_hwm_kib(pid: int) -> int:
    """VmHWM of a running process (KiB), 0 once it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def alias_bomb(indent: str = "  ", levels: int = BOMB_LEVELS) -> str:
    """YAML lines defining anchors a..: each level a list of nine aliases of the previous one
    (9**levels leaves from about 1 KB); the last anchor's node is the whole bomb."""
    names = "abcdefghijklmnop"
    lines = [f'{indent}{names[0]}: &{names[0]} ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        p = names[i - 1]
        lines.append(f"{indent}{names[i]}: &{names[i]} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]")
    return "\n".join(lines) + "\n"
