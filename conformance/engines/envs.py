"""Engine environments: one pinned, cached virtualenv per (engine, version), for every engine file
whose plan module runs in `environment: venv` (the oracles: vLLM and SGLang).

Contract: `install(engine)` leaves `<cache>/oracles/<engine>-<version>/` with the pinned
release importable at exactly that version, `pip check` clean, and a marker file
`conformance-env.json` recording what was verified; it is a no-op when the marker is present
and the interpreter still runs. The project itself is not installed there: the probe runs
with the checkout on PYTHONPATH, so the oracle process always runs this checkout's adapter.
The build itself runs without PYTHONPATH (pip check must see the venv, not the checkout's
egg-info); a venv left without pip by an interrupted build is removed and built again, saying
so; the venv's path must resolve inside `<cache>/oracles`, or nothing is built or removed. Where a venv
lives and how a process runs in it is `engines.venv`'s.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from conformance import paths
from conformance.engines.engine_file import EngineFile
from conformance.engines.venv import OracleEnv, oracle_env, oracle_process_env
from conformance.errors import OracleEnvError

# What the probe needs inside a venv of its own (jsonschema validates in the engine's process);
# installed at these pins only where the engine did not bring them already.
PROBE_REQUIREMENTS = ("jsonschema==4.26.0", "pyyaml==6.0.4")


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return path.resolve() != root.resolve()
    except ValueError:
        return False


def _build_env() -> dict[str, str]:
    """The environment of a venv build step: the checkout off the path (pip check would read its egg-info)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")
            and not k.startswith(("VIRTUAL_ENV", "PIP_TARGET", "PIP_PREFIX"))}


def _has_pip(env: OracleEnv) -> bool:
    try:
        return subprocess.run([str(env.python), "-m", "pip", "--version"], capture_output=True, env=_build_env(),
                              timeout=120, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _run(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    with log.open("a") as fh:
        fh.write(f"\n$ {' '.join(argv)}\n")
        fh.flush()
        return subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, env=_build_env() if env is None else env,
                              check=False)


def _tail(path: Path, n: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def installed_version(env: OracleEnv, spec: EngineFile, module: str | None = None) -> str:
    """The version the venv's interpreter imports (not what pip metadata claims)."""
    module = module or env.engine
    out = subprocess.run(
        [str(env.python), "-c", f"import {module}, sys; sys.stdout.write({module}.__version__)"],
        capture_output=True, text=True, env=oracle_process_env(spec), timeout=300, check=False,
    )
    if out.returncode != 0:
        raise OracleEnvError(f"{env.path}: `import {module}` failed:\n{out.stderr.strip()[-2000:]}")
    return out.stdout.strip()


def install(spec: EngineFile, progress: Callable[[str], None] = lambda m: None, force: bool = False) -> OracleEnv:
    """Build (or reuse) the pinned venv of an oracle. Raises OracleEnvError with the log tail on failure."""
    env = oracle_env(spec)
    if env.state() == "ready" and not force:
        return env
    env.path.parent.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock

    with FileLock(str(env.path.parent / f"{env.path.name}.lock")):  # parallel test workers build once
        if env.state() == "ready" and not force:
            return env
        return _build(spec, env, progress, force)


def _build(spec: EngineFile, env: OracleEnv, progress: Callable[[str], None], force: bool) -> OracleEnv:
    log = env.path.parent / f"{env.path.name}.build.log"
    log.write_text(f"building {spec.name}=={spec.version} at {time.strftime('%Y-%m-%dT%H:%M:%S')}\n")
    if not _inside(env.path, paths.oracle_envs_dir()):
        raise OracleEnvError(f"{spec.name}: {env.path} resolves outside {paths.oracle_envs_dir()}: refusing to build")
    reuse = env.state() == "incomplete" and env.python.exists() and not force
    if reuse and not _has_pip(env):
        progress(f"{spec.name}: {env.path} has no pip (a build interrupted while creating the venv?): "
                 f"removing it and building again")
        with log.open("a") as fh:
            fh.write(f"{env.path}: no pip in the venv (an interrupted build): rebuilt from scratch\n")
        reuse = False
    if not reuse:
        shutil.rmtree(env.path, ignore_errors=True)
        progress(f"{spec.name}: creating venv {env.path}")
        if _run([sys.executable, "-m", "venv", str(env.path)], log).returncode != 0:
            raise OracleEnvError(f"{spec.name}: venv creation failed; see {log}:\n{_tail(log)}")
    pip = [str(env.python), "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check"]
    progress(f"{spec.name}: pip install {' '.join(spec.plan.pip)} (about 4 minutes when not cached)")
    if _run(pip + list(spec.plan.pip), log).returncode != 0:
        raise OracleEnvError(f"{spec.name}: pip install failed; see {log}:\n{_tail(log)}")
    probe_check = subprocess.run([str(env.python), "-c", "import jsonschema, yaml"], capture_output=True,
                                 env=_build_env(), check=False)
    if probe_check.returncode != 0:
        progress(f"{spec.name}: adding the probe's own needs {' '.join(PROBE_REQUIREMENTS)}")
        if _run(pip + list(PROBE_REQUIREMENTS), log).returncode != 0:
            raise OracleEnvError(f"{spec.name}: probe requirements failed; see {log}:\n{_tail(log)}")
    progress(f"{spec.name}: verifying (pip check, imported version)")
    check = _run([str(env.python), "-m", "pip", "check"], log)
    if check.returncode != 0:
        raise OracleEnvError(f"{spec.name}: `pip check` reports broken requirements in {env.path}; see {log}:\n"
                             f"{_tail(log, 10)}")
    pip_check = "clean"
    version = installed_version(env, spec)
    if version != spec.version:
        raise OracleEnvError(f"{spec.name}: pinned {spec.version} but the venv imports {version}")
    env.marker.write_text(json.dumps({
        "engine": spec.name, "version": version, "requirements": list(spec.plan.pip),
        "pip_check": pip_check, "python": sys.version.split()[0],
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }, indent=2) + "\n")
    return env


def list_envs(engines: "list[EngineFile]") -> list[dict[str, str]]:
    rows = []
    for spec in engines:
        if not spec.uses_venv:
            continue
        env = oracle_env(spec)
        info = {}
        if env.marker.is_file():
            try:
                info = json.loads(env.marker.read_text())
            except (OSError, json.JSONDecodeError):
                info = {}
        rows.append({
            "engine": spec.name, "version": env.version, "path": str(env.path), "state": env.state(),
            "pip_check": str(info.get("pip_check", "")).splitlines()[0] if info.get("pip_check") else "",
        })
    return rows
