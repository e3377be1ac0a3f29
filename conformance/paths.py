"""Where the framework finds its data and keeps its caches.

Every location is computed from arguments or the environment at call time: no module state.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
SCHEMAS_DIR = PACKAGE_DIR / "documents" / "schemas"
MODELS_DIR = PACKAGE_DIR / "models"


def cases_dir() -> Path:
    """The shipped case files (`suites/cases/*.yaml`)."""
    return REPO_ROOT / "suites" / "cases"


def live_cases_dir() -> Path:
    """The cases served live (`conformance run --live`, `pytest suites/live`): suites/live/cases."""
    return REPO_ROOT / "suites" / "live" / "cases"


def goldens_dir() -> Path:
    """The recorded goldens; `DFLASH_CONFORMANCE_GOLDENS` overrides (tests of the golden machinery)."""
    override = os.environ.get("DFLASH_CONFORMANCE_GOLDENS")
    return Path(override).expanduser().resolve() if override else REPO_ROOT / "goldens"


def reports_dir() -> Path:
    """Where `conformance run` writes by default: `reports/` of the working directory (a team's own
    repository when run from there), never the framework checkout's unless run from it."""
    return Path.cwd() / "reports"


def cache_dir() -> Path:
    """Root of the framework's cache, outside the checkout.

    `DFLASH_CONFORMANCE_CACHE` overrides; else `$XDG_CACHE_HOME/dflash-conformance`
    (default `~/.cache/dflash-conformance`).
    """
    override = os.environ.get("DFLASH_CONFORMANCE_CACHE")
    if override:
        return Path(override).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser().resolve() / "dflash-conformance"


def oracle_envs_dir() -> Path:
    """Oracle virtualenvs, one per `<engine>-<version>`."""
    return cache_dir() / "oracles"


def oracle_home_dir(engine: str, version: str) -> Path:
    """HOME / XDG_CACHE_HOME / VLLM_CACHE_ROOT given to an oracle process: the project's, never the user's."""
    return cache_dir() / "oracle-home" / f"{engine}-{version}"
