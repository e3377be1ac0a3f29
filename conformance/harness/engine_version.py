"""The version an engine file reports: its `version`, else what its `version_command` prints.

Contract: `resolved_version(engine)` returns `engine.version`, else the last line `version_command`
prints (run under the engine's own `timeout_s`, its stdout read through `MAX_VERSION_BYTES`, nothing it
starts left running), else 'unknown' (adapters of a module plan report their own). The command runs
once per engine file object: the answer is kept on that object, as a cached property would keep it.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from conformance.engines.engine_file import EngineFile, fill
from conformance.harness.capture import run_capped

MAX_VERSION_BYTES = 1 << 16   # a version command's stdout (the rest is discarded unread)
_KEPT = "resolved_version"    # where the answer is kept on the (frozen) engine file object


def resolved_version(engine: EngineFile) -> str:
    kept = vars(engine).get(_KEPT)
    if kept is None:
        kept = _resolve(engine)
        object.__setattr__(engine, _KEPT, kept)
    return kept


def _resolve(engine: EngineFile) -> str:
    if engine.version:
        return engine.version
    if not engine.version_command:
        return "unknown"
    values = {"engine_dir": str(engine.engine_dir), "python": sys.executable}
    argv = [fill(a, values, f"{engine.path}: version_command") for a in engine.version_command]
    timeout_s = engine.timeout_s
    with tempfile.TemporaryDirectory(prefix="version-") as tmp:
        try:
            rc, text, _ = run_capped(argv, timeout_s, MAX_VERSION_BYTES, Path(tmp), cwd=str(engine.engine_dir))
        except OSError as exc:
            return f"unknown ({type(exc).__name__}: {exc})"
    if rc is None:
        return f"unknown (version_command did not finish within the engine's {timeout_s:g} s; killed)"
    lines = text.strip().splitlines()
    if rc == 0 and lines:
        return lines[-1].strip()[:200]
    return f"unknown (version_command exited {rc})"
