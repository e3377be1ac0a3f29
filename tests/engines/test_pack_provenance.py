"""An oracle pack's provenance, the GPU host's environment (NVML, the engine's torch, never imported by the
framework process), and the wheel tags a pack accepts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata

import pytest

from conformance import paths
from conformance.engines import env_pack
from conformance.engines.env_pack_fetch import Target, required_glibc
from conformance.engines.pack_provenance import pack_provenance
from conformance.engines.registry import resolve_engine
from conformance.engines.venv import oracle_env
from conformance.errors import ConformanceError
from conformance.harness.host_env import (ABSENT, cuda_version_text, deviations_as_found, engine_torch, host_environment,
                                         host_packages, nvml_environment)

PLATFORM = "manylinux_2_28_x86_64"


@pytest.fixture(scope="module")
def pack_dir(tmp_path_factory):
    """A pack of the vLLM venv's tabulate, with torch left to a host that has torch at the venv's version."""
    spec = resolve_engine("vllm")
    if oracle_env(spec).state() != "ready":
        pytest.skip("vLLM oracle venv not built (conformance envs install vllm)")
    freeze = env_pack.venv_freeze(spec)[1]
    tmp = tmp_path_factory.mktemp("prov")
    host = tmp / "host-freeze.txt"
    host.write_text(f"torch=={freeze['torch'].version}\n")
    out = tmp / "pack"
    run = subprocess.run(
        [sys.executable, "-m", "conformance", "envs", "pack", "vllm", "--python", "3.12", "--platform", PLATFORM,
         "--out", str(out), "--only", "tabulate", "torch", "--host-freeze", str(host),
         "--deviation-env", "VLLM_USE_FLASHINFER_SAMPLER=0", "--deviation-reason", "no FlashInfer on the host"],
        capture_output=True, text=True, cwd=str(paths.REPO_ROOT), timeout=300,
        env=dict(os.environ, PYTHONPATH=str(paths.REPO_ROOT)))
    assert run.returncode == 0, run.stderr
    return out, freeze


def test_pack_provenance_is_what_the_pack_holds(pack_dir):
    out, freeze = pack_dir
    doc = json.loads((out / "oracle-pack.json").read_text())
    prov = pack_provenance(out)
    assert (prov["engine"], prov["version"], prov["python"], prov["platform"]) == ("vllm", "0.33.0", "3.12", PLATFORM)
    assert prov["packages"] == {freeze["tabulate"].name: freeze["tabulate"].version}
    assert prov["left_out"] == doc["left_out"] and prov["deviations"] == doc["deviations"]
    assert {"kind": "env", "name": "VLLM_USE_FLASHINFER_SAMPLER", "value": "0",
            "reason": "no FlashInfer on the host"} in prov["deviations"]


def test_the_engines_torch_is_read_from_the_pack_without_a_python(pack_dir):
    out, freeze = pack_dir
    got = engine_torch(out)
    assert got["torch"] == freeze["torch"].version and got["source"] == "oracle-pack.json (the host's)"


def test_a_missing_or_malformed_pack_is_named(tmp_path):
    with pytest.raises(ConformanceError, match="oracle-pack.json: no such file"):
        pack_provenance(tmp_path)
    (tmp_path / "oracle-pack.json").write_text(json.dumps({"engine": "vllm", "packages": []}))
    with pytest.raises(ConformanceError, match="missing version, python, platform, left_out, deviations"):
        pack_provenance(tmp_path)
    (tmp_path / "oracle-pack.json").write_text("{not json")
    with pytest.raises(ConformanceError, match="unreadable"):
        pack_provenance(tmp_path)


def test_the_engines_torch_is_imported_in_a_child_with_the_site_first_never_here(tmp_path):
    """The child imports torch (the framework's own, here) with a site dir first on its path; this process
    and the framework code never import it."""
    site = tmp_path / "site"
    site.mkdir()
    probe = (
        "import json, sys; from conformance.harness.host_env import host_environment; "
        f"r = host_environment(python=sys.executable, site={str(site)!r}); "
        "print(json.dumps({'r': r, 'torch_here': 'torch' in sys.modules}))")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=str(paths.REPO_ROOT)))
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert got["torch_here"] is False
    assert got["r"]["engine_torch"]["torch"] == metadata.version("torch")
    assert got["r"]["engine_torch"]["source"] == f"imported by {sys.executable} with {site} first on PYTHONPATH"
    nvml = got["r"]["nvml"]
    assert (nvml["available"] and nvml["driver_version"] and nvml["cards"]) or (not nvml["available"] and nvml["why"])


def test_a_python_without_torch_says_why(tmp_path):
    got = engine_torch(python=sys.executable, site=tmp_path)
    assert got["torch"] == metadata.version("torch")
    bare = tmp_path / "bare-python"
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    bare.chmod(0o755)
    got = engine_torch(python=str(bare), site=tmp_path)
    assert got["torch"] is None and "import torch failed: ModuleNotFoundError" in got["why"]


def test_a_package_left_to_the_host_reads_as_the_host_has_it_or_absent(tmp_path):
    """The pack assumed the host provides nvidia-cutlass-dsl (--use-host 'nvidia-*'); the engine's python
    is asked, and a package it lacks is recorded as absent, not as provided (SGLang on one H200 ran its
    Triton fallback for want of it while the golden said "the host provides it")."""
    pack = {"engine": "sglang", "version": "0.5.23", "python": "3.12", "platform": PLATFORM, "packages": [],
            "left_out": [], "deviations": [
                {"kind": "host_package", "name": "nvidia-cutlass-dsl", "pack_version": "4.8.0",
                 "host_version": "not in the host freeze", "reason": "the host provides it (--use-host nvidia-*)"},
                {"kind": "host_package", "name": "packaging", "pack_version": "1.0",
                 "host_version": "not in the host freeze", "reason": "the host provides it (--use-host packaging)"},
                {"kind": "env", "name": "SGLANG_SIMULATE_ACC_LEN", "value": "4.0", "reason": "synthetic acceptance"}]}
    (tmp_path / "oracle-pack.json").write_text(json.dumps(pack))
    got = host_packages(["nvidia-cutlass-dsl", "packaging"], sys.executable, tmp_path / "site")
    assert got["found"] == {"nvidia-cutlass-dsl": None, "packaging": metadata.version("packaging")}
    env = host_environment(tmp_path, python=sys.executable)
    assert env["host_packages"]["found"] == got["found"]
    assert env["host_packages"]["source"] == f"importlib.metadata in {sys.executable} with {tmp_path / 'site'} first on PYTHONPATH"
    devs = deviations_as_found(pack["deviations"], env["host_packages"]["found"])
    assert [d.get("host_version") for d in devs] == [ABSENT, metadata.version("packaging"), None]
    assert devs[2] == pack["deviations"][2] and pack["deviations"][0]["host_version"] == "not in the host freeze"
    # a python that cannot answer says why, and leaves the deviations as the pack wrote them
    bare = tmp_path / "broken-python"
    bare.write_text("#!/bin/sh\nexit 3\n")
    bare.chmod(0o755)
    broken = host_packages(["packaging"], str(bare))
    assert broken["found"] == {} and broken["why"]
    assert deviations_as_found(pack["deviations"], broken["found"]) == pack["deviations"]


def test_nvml_without_pynvml_says_so():
    probe = ("import json, sys; sys.modules['pynvml'] = None; "
             "from conformance.harness.host_env import nvml_environment; print(json.dumps(nvml_environment()))")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(paths.REPO_ROOT)))
    got = json.loads(run.stdout)
    assert got == {"available": False, "why": "pynvml is not importable (install nvidia-ml-py on the GPU host)"}
    here = nvml_environment()
    assert here["available"] in (True, False) and (here.get("why") or here.get("cards") is not None)


@pytest.mark.parametrize("nvml_int, text", [(13000, "13.0"), (12080, "12.8"), (12040, "12.4")])
def test_cuda_version_text(nvml_int, text):
    assert cuda_version_text(nvml_int) == text


def test_platform_tags_take_the_given_one_then_older_then_newer_manylinux_of_the_same_arch():
    tags = Target("3.12", PLATFORM).platform_tags()
    assert tags[0] == PLATFORM
    assert "manylinux_2_18_x86_64" in tags and "manylinux2014_x86_64" in tags  # nvidia-nccl-cu13 2.30.7's
    assert tags.index("manylinux_2_17_x86_64") < tags.index("manylinux_2_31_x86_64")  # older before newer
    assert tags[-1] == "manylinux_2_35_x86_64" and not any("aarch64" in t for t in tags)
    assert Target("3.12", "win_amd64").platform_tags() == ["win_amd64"]
    assert Target("3.12", "manylinux2014_aarch64").platform_tags()[:2] == ["manylinux2014_aarch64", "manylinux_2_17_aarch64"]


@pytest.mark.parametrize("wheel, glibc", [
    ("llguidance-1.7.6-cp39-abi3-manylinux_2_31_x86_64.whl", (2, 31)),
    ("aiohttp-3.14.5-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl", (2, 17)),
    ("tabulate-0.10.0-py3-none-any.whl", None),
])
def test_required_glibc_is_the_oldest_of_a_wheels_manylinux_tags(wheel, glibc):
    assert required_glibc(wheel) == glibc
