"""Where an engine's pinned virtualenv lives, and how a process runs in it (offline, every cache the project's).

Contract: `oracle_env(engine)` is the `OracleEnv` of an engine file whose plan module runs in `environment:
venv` (the oracles: vLLM, SGLang): `<cache>/oracles/<engine>-<version>/`, refused (`OracleEnvError`) where the
version would name a directory outside it; `OracleEnv.state()` says whether it is built (`conformance.engines.envs`
builds it). `oracle_process_env(engine)` is the environment of any process of such an engine. Nothing here
builds, removes or caches anything.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from conformance import paths
from conformance.engines.engine_file import EngineFile
from conformance.errors import OracleEnvError

MARKER = "conformance-env.json"


@dataclass(frozen=True)
class OracleEnv:
    engine: str
    version: str
    path: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def marker(self) -> Path:
        return self.path / MARKER

    def state(self) -> str:
        """missing | ready | incomplete (a venv without a verified marker: a build that did not finish)."""
        if not self.path.exists():
            return "missing"
        if self.marker.is_file() and self.python.exists():
            return "ready"
        return "incomplete"


def oracle_env(spec: EngineFile) -> OracleEnv:
    """The venv of an engine whose plan runs in `environment: venv` (keyed by name and version)."""
    if not spec.uses_venv or not spec.version:
        raise OracleEnvError(f"{spec.name} plans in no venv of its own with a pinned version")
    root = paths.oracle_envs_dir()
    path = root / f"{spec.name}-{spec.version}"
    if path.parent.resolve() != root.resolve() or path.name in (".", "..") or os.sep in f"{spec.name}-{spec.version}":
        raise OracleEnvError(f"{spec.name}: version {spec.version!r} does not name a directory inside {root}: "
                             f"refusing to build or remove anything for it")
    return OracleEnv(spec.name, spec.version, path)


def oracle_process_env(spec: EngineFile) -> dict[str, str]:
    """Environment for any process of a venv engine: offline, and every cache pointed at the project's."""
    home = paths.oracle_home_dir(spec.name, spec.version or "unpinned")
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONHOME"))}
    env.update({
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "VLLM_CACHE_ROOT": str(home / ".cache" / "vllm"),
        "HF_HOME": str(home / ".cache" / "huggingface"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "SGLANG_DISABLE_REQUEST_LOGGING": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": str(paths.REPO_ROOT),
        "PIP_NO_CACHE_DIR": "1",
    })
    env.update({k: v for k, v in spec.plan.env.items() if v is not None})
    return env
