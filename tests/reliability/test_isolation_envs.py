"""Oracle venvs: pinned, verified after install (pip check, imported version), and a mismatch between
what pip installed and what the interpreter imports is caught (a throwaway venv, a fake package,
no network)."""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from conformance.engines import envs
from conformance.engines.engine_file import EngineFile, ModulePlan
from conformance.engines.registry import resolve_engine
from conformance.engines.venv import oracle_env
from conformance.errors import OracleEnvError


@pytest.mark.oracle
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_ready_oracle_env_marker_records_what_was_verified(engine):
    spec = resolve_engine(engine)
    env = oracle_env(spec)
    if env.state() != "ready":
        pytest.skip(f"{env.path} is {env.state()}")
    marker = json.loads(env.marker.read_text())
    assert marker["engine"] == engine
    assert marker["version"] == spec.version
    assert marker["requirements"] == list(spec.plan.pip)
    assert all("==" in r for r in marker["requirements"]), "oracle requirements are exact pins"
    assert marker["pip_check"] == "clean", marker["pip_check"]
    assert envs.installed_version(env, spec) == spec.version, "the interpreter imports the pinned release"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def fake_wheel(directory: Path, name: str, metadata_version: str, imported_version: str) -> Path:
    """A pure-Python wheel whose metadata says `metadata_version` while its module says
    `imported_version`. It also ships stub `jsonschema` / `yaml` modules so the probe's own needs
    are met without an index."""
    files = {
        f"{name}/__init__.py": f'__version__ = "{imported_version}"\n'.encode(),
        "jsonschema.py": b"# stub: the probe imports it\n",
        "yaml.py": b"# stub: the probe imports it\n",
        f"{name}-{metadata_version}.dist-info/METADATA":
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {metadata_version}\n".encode(),
        f"{name}-{metadata_version}.dist-info/WHEEL":
            b"Wheel-Version: 1.0\nGenerator: conformance-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = f"{name}-{metadata_version}.dist-info/RECORD"
    lines = [_record_line(n, d) for n, d in files.items()] + [f"{record},,"]
    files[record] = ("\n".join(lines) + "\n").encode()
    wheel = directory / f"{name}-{metadata_version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for n, d in files.items():
            zf.writestr(n, d)
    return wheel


def test_pinned_version_that_imports_another_version_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("DFLASH_CONFORMANCE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # nothing leaves this machine
    wheel = fake_wheel(tmp_path, "fakeoracle", metadata_version="1.0.0", imported_version="2.0.0")
    spec = EngineFile(name="fakeoracle", role="oracle", version="1.0.0",
                      plan=ModulePlan("fakeoracle.plan", environment="venv", pip=(str(wheel),)))
    with pytest.raises(OracleEnvError) as err:
        envs.install(spec)
    assert str(err.value) == "fakeoracle: pinned 1.0.0 but the venv imports 2.0.0"
    env = oracle_env(spec)
    assert env.state() == "incomplete", "no marker: the env is never taken as ready"
    assert not env.marker.exists()
    log = (env.path.parent / f"{env.path.name}.build.log").read_text()
    assert "pip check" in log and "Successfully installed fakeoracle-1.0.0" in log, log[-2000:]
