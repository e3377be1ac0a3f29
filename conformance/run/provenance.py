"""What a run directory records of where and against what it ran, so runs of many hosts can be merged,
compared and packaged.

Contract: `run_provenance(goldens_dir, shard)` returns the `provenance` block of run.json:

    host              the host name (socket.gethostname())
    device            the host's accelerators as NVML names them ("NVIDIA H200 x 8"), else "cpu: <model>"
    framework_commit  `git rev-parse HEAD` of the framework checkout (None outside a git checkout),
                      framework_dirty: whether its tracked files differ from that commit
    source_digest     `source_digest()`: the code that ran, whatever git says of it
    goldens_revision  `goldens_revision(goldens_dir)`
    shard             {"index": i, "count": n} or None (the whole matrix)

`goldens_revision(under_test_dir)` is a sha256 over every golden file the run judges against (the
framework's goldens/, and an engine under test's `--goldens-dir` when given): its path relative to
its root and its bytes, in sorted order, so two checkouts with the same goldens agree whatever their
commits, and any edit of a golden changes it.

`source_digest()` is the same kind of sha256 over every file of the framework's package and the
reference engine (`SOURCE_ROOTS`, `__pycache__` left out). It names the code a run ran where the commit
cannot: an installed copy with no `.git`, a copy whose `.git` is older than its files (HEAD then reads
as modified), uncommitted edits. Two hosts that ran the same code agree on it.
"""

from __future__ import annotations

import hashlib
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

from conformance import paths


SOURCE_ROOTS = ("conformance", "engine_under_test")     # the framework's package, the reference engine
_NOT_SOURCE = "__pycache__"


def _tree_digest(h, label: str, root: Path) -> None:
    h.update(f"{label}\0".encode())
    if not root.is_dir():
        return
    for f in sorted(p for p in root.rglob("*") if p.is_file() and _NOT_SOURCE not in p.relative_to(root).parts):
        h.update(f.relative_to(root).as_posix().encode("utf-8") + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())


def goldens_revision(under_test_dir: Path | None = None) -> str:
    h = hashlib.sha256()
    _tree_digest(h, "goldens", paths.goldens_dir())
    if under_test_dir is not None:
        _tree_digest(h, "goldens-dir", Path(under_test_dir))
    return "sha256:" + h.hexdigest()


def source_digest() -> str:
    """sha256 over the files under each of SOURCE_ROOTS of the checkout (module docstring)."""
    h = hashlib.sha256()
    for name in SOURCE_ROOTS:
        _tree_digest(h, name, paths.REPO_ROOT / name)
    return "sha256:" + h.hexdigest()


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(paths.REPO_ROOT), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def framework_commit() -> tuple[str | None, bool]:
    """(HEAD of the framework checkout, whether its tracked files are modified); (None, False) outside git."""
    head = _git("rev-parse", "HEAD")
    if head is None:
        return None, False
    return head, bool(_git("status", "--porcelain", "--untracked-files=no"))


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_device() -> str:
    from conformance.harness.host_env import nvml_environment

    env = nvml_environment()
    cards = env.get("cards") or [] if env.get("available") else []
    if cards:
        names = [str(c.get("name")) for c in cards]
        return ", ".join(f"{n} x {names.count(n)}" for n in dict.fromkeys(names))
    return f"cpu: {_cpu_model()}"


def run_provenance(goldens_dir: Path | None, shard: Any = None) -> dict[str, Any]:
    commit, dirty = framework_commit()
    from conformance import paths

    return {"host": socket.gethostname(), "device": host_device(), "framework_commit": commit,
            "repo_root": str(paths.REPO_ROOT), "cache_dir": str(paths.cache_dir()),
            "framework_dirty": dirty, "source_digest": source_digest(),
            "goldens_revision": goldens_revision(goldens_dir),
            "shard": shard.to_json() if shard is not None else None}
