"""The cache's `logs/` directory: where a plan without `--log-dir` keeps its processes' logs.

Contract: `new_log_dir(prefix)` creates `<cache>/logs/<prefix>-XXXX/` and first prunes `logs/`:
directories older than `MAX_AGE_S` go, then all but the newest `MAX_COUNT` (so the next one makes
`MAX_COUNT`). Only directories are pruned (a stray file is left alone), newest by modification
time; a directory that cannot be removed (another user's, in use) is skipped, never an error.
A directory whose creator is still running is never pruned: `new_log_dir` writes its owner
(`OWNER_FILE`: pid and the process's start time, so a reused pid does not count) and `prune`
leaves a directory alone while that process lives, whatever its age or rank.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from conformance import paths

MAX_AGE_S = 7 * 24 * 3600.0
MAX_COUNT = 50
OWNER_FILE = ".owner"


def _start_ticks(pid: int) -> str | None:
    """The process's start time (clock ticks since boot) from /proc, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return None if fields[0] == "Z" else fields[19]


def _owner_alive(directory: Path) -> bool:
    try:
        pid_text, _, ticks = (directory / OWNER_FILE).read_text().partition(" ")
        pid = int(pid_text)
    except (OSError, ValueError):
        return False
    if pid == os.getpid():
        return True
    now = _start_ticks(pid)
    return now is not None and now == ticks.strip()


def logs_root() -> Path:
    root = paths.cache_dir() / "logs"
    root.mkdir(parents=True, exist_ok=True)
    return root


def prune(root: Path, max_age_s: float = MAX_AGE_S, max_count: int = MAX_COUNT,
          now: float | None = None) -> list[Path]:
    """Remove old log directories under `root` (see the module doc); returns those removed."""
    now = time.time() if now is None else now
    dirs: list[tuple[float, Path]] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                dirs.append((entry.stat(follow_symlinks=False).st_mtime, Path(entry.path)))
        except OSError:
            continue
    dirs.sort(reverse=True)   # newest first
    doomed = [p for i, (mtime, p) in enumerate(dirs)
              if (now - mtime > max_age_s or i >= max_count) and not _owner_alive(p)]
    removed = []
    for p in doomed:
        try:
            shutil.rmtree(p)
            removed.append(p)
        except OSError:
            continue
    return removed


def new_log_dir(prefix: str) -> Path:
    root = logs_root()
    prune(root, max_count=MAX_COUNT - 1)
    out = Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=root))
    (out / OWNER_FILE).write_text(f"{os.getpid()} {_start_ticks(os.getpid()) or ''}")
    return out
