"""`conformance envs pack`: the real cached vLLM venv's exact versions, packed for another Python/platform
(small pure-Python subsets, fetched from the package index), installed offline by install.sh with a real
pip, and run through the launchers; bad input exits 2 with a message naming what is wrong."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from conformance import paths
from conformance.cli.main import main
from conformance.engines import env_pack
from conformance.engines.env_pack_fetch import Pin, Target, wheel_matches
from conformance.engines.env_pack_scripts import Launcher, write_scripts
from conformance.engines.registry import resolve_engine
from conformance.engines.venv import oracle_env

PLATFORM = "manylinux_2_28_x86_64"
SMALL = ("tabulate", "sniffio", "packaging")  # pure-Python wheels the vLLM venv resolved


def _vllm_freeze() -> dict[str, Pin]:
    spec = resolve_engine("vllm")
    if oracle_env(spec).state() != "ready":
        pytest.skip("vLLM oracle venv not built (conformance envs install vllm)")
    return env_pack.venv_freeze(spec)[1]


def _conformance(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, PYTHONPATH=str(paths.REPO_ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True, text=True,
                          cwd=str(paths.REPO_ROOT), timeout=600, env=full_env)


@pytest.fixture(scope="module")
def small_pack(tmp_path_factory):
    """A pack of three small packages; the host freeze has sniffio at the venv's version, tabulate at another."""
    freeze = _vllm_freeze()
    tmp = tmp_path_factory.mktemp("pack")
    host = tmp / "host-freeze.txt"
    host.write_text(f"# the host\nsniffio=={freeze['sniffio'].version}\ntabulate==0.0.1\n")
    out = tmp / "pack"
    run = _conformance("envs", "pack", "vllm", "--python", "3.12", "--platform", PLATFORM, "--out", str(out),
                       "--only", *SMALL, "--host-freeze", str(host),
                       "--deviation-env", "PACK_TEST_DEVIATION=on", "--deviation-arg=--probe-flag",
                       "--deviation-arg", "probe value", "--deviation-reason", "the stand-in reason")
    assert run.returncode == 0, run.stderr
    return {"out": out, "freeze": freeze, "stdout": run.stdout, "host": host}


def test_pack_writes_the_venvs_exact_versions_with_hashes_and_what_it_left_out(small_pack):
    out, freeze = small_pack["out"], small_pack["freeze"]
    doc = json.loads((out / "oracle-pack.json").read_text())
    assert (doc["engine"], doc["version"], doc["python"], doc["platform"]) == ("vllm", "0.33.0", "3.12", PLATFORM)
    packed = {canonicalize_name(p["name"]): p for p in doc["packages"]}
    assert set(packed) == {"tabulate", "packaging"}  # sniffio: the host has that exact version
    for key, p in packed.items():
        assert p["version"] == freeze[key].version
        wheel = out / "wheels" / p["file"]
        assert hashlib.sha256(wheel.read_bytes()).hexdigest() == p["sha256"]
        assert wheel.stat().st_size == p["size_bytes"]
        assert f"{freeze[key].name}=={freeze[key].version}  {p['file']}" in small_pack["stdout"]
    assert sorted(w.name for w in (out / "wheels").glob("*.whl")) == sorted(p["file"] for p in doc["packages"])
    left = {canonicalize_name(x["name"]): x for x in doc["left_out"]}
    assert left["sniffio"]["reason"] == "the host has this exact version (--host-freeze)"
    assert left["sniffio"]["host_version"] == freeze["sniffio"].version
    assert set(left) == set(freeze) - set(packed)  # everything else, each with a reason
    assert all(x["reason"] for x in doc["left_out"])
    assert {"kind": "env", "name": "PACK_TEST_DEVIATION", "value": "on", "reason": "the stand-in reason"} in doc["deviations"]
    args = [d for d in doc["deviations"] if d["kind"] == "arg"]
    assert [a["value"] for a in args] == ["--probe-flag", "probe value"]
    assert all(a["applies_to"] == ["vllm serve"] and a["reason"] == "the stand-in reason" for a in args)


def test_the_launcher_runs_the_venvs_real_console_entry_with_deviations_after_serve_only(small_pack):
    text = (small_pack["out"] / "bin" / "vllm").read_text()
    ep = next(oracle_env(resolve_engine("vllm")).path.glob("lib/python*/site-packages/vllm-*.dist-info/entry_points.txt"))
    line = next(ln for ln in ep.read_text().splitlines() if ln.replace(" ", "").startswith("vllm="))
    module, attr = line.split("=", 1)[1].strip().split(":")
    assert f"import sys, {module}; " in text and f"sys.exit({module}.{attr}())" in text
    assert "export PACK_TEST_DEVIATION=on\n" in text
    assert "if [ \"${1:-}\" = serve ]; then extra=(--probe-flag 'probe value'); fi" in text


def test_install_sh_installs_the_wheels_offline_is_idempotent_and_the_launcher_runs(small_pack, tmp_path):
    pack = tmp_path / "copied-pack"  # the pack as copied to the host
    shutil.copytree(small_pack["out"], pack)
    env = dict(os.environ, ORACLE_PACK_PYTHON=sys.executable)
    first = subprocess.run(["bash", str(pack / "install.sh")], capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 0, first.stderr
    doc = json.loads((pack / "oracle-pack.json").read_text())
    site = pack / "site"
    for p in doc["packages"]:
        assert f"  {p['file'].split('-')[0]}=={p['version']}" in first.stdout
        assert any(site.glob(f"{p['file'].split('-')[0]}-{p['version']}.dist-info"))
    again = subprocess.run(["bash", str(pack / "install.sh")], capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0 and "already installed" in again.stdout

    # a stand-in entry in the installed site, run through a launcher of the same kind as bin/vllm
    (site / "standin_entry.py").write_text(
        "import json, os, sys, tabulate\n"
        "def main():\n"
        "    print(json.dumps({'argv': sys.argv, 'env': os.environ.get('PACK_TEST_DEVIATION'),\n"
        "                      'tabulate': tabulate.__file__, 'argv0': sys.argv[0]}))\n"
        "    return 0\n")
    write_scripts(pack, [Launcher("standin", "standin_entry", "main", "serve")], {"PACK_TEST_DEVIATION": "on"},
                  ["--probe-flag", "probe value"], "stand-in")
    served = subprocess.run([str(pack / "bin" / "standin"), "serve", "model-x"], capture_output=True, text=True,
                            env=env, timeout=120)
    assert served.returncode == 0, served.stderr
    got = json.loads(served.stdout)
    assert got["argv"][1:] == ["serve", "model-x", "--probe-flag", "probe value"] and got["argv0"] == "standin"
    assert got["env"] == "on" and Path(got["tabulate"]).is_relative_to(site)
    other = subprocess.run([str(pack / "bin" / "standin"), "bench"], capture_output=True, text=True, env=env, timeout=120)
    assert json.loads(other.stdout)["argv"][1:] == ["bench"]

    # the interpreter launcher (SGLang's manifest runs `{sglang_python} -m sglang.launch_server`): the site and
    # env apply to any use; the deviation args only to `-m <its module>`
    write_scripts(pack, [Launcher("python", None, None, "standin_entry")], {"PACK_TEST_DEVIATION": "on"},
                  ["--probe-flag"], "stand-in")
    as_module = subprocess.run([str(pack / "bin" / "python"), "-m", "standin_entry", "x"], capture_output=True,
                               text=True, env=env, timeout=120)
    assert as_module.returncode == 0 and as_module.stdout == ""   # a module run without a main guard prints nothing
    code = ("import sys, standin_entry; sys.argv[0] = 'standin'; standin_entry.main()")
    plain = subprocess.run([str(pack / "bin" / "python"), "-c", code, "y"], capture_output=True, text=True,
                           env=env, timeout=120)
    got = json.loads(plain.stdout)
    assert got["argv"][1:] == ["y"] and got["env"] == "on" and Path(got["tabulate"]).is_relative_to(site)
    (site / "standin_main.py").write_text("import standin_entry\nstandin_entry.main()\n")
    write_scripts(pack, [Launcher("python", None, None, "standin_main")], {}, ["--probe-flag"], "stand-in")
    main = subprocess.run([str(pack / "bin" / "python"), "-m", "standin_main", "z"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert json.loads(main.stdout)["argv"][1:] == ["z", "--probe-flag"]
    with pytest.raises(ValueError, match="only after `-m <module>`"):
        write_scripts(pack, [Launcher("python", None)], {}, ["--probe-flag"], "stand-in")


def test_install_sh_refuses_a_target_that_holds_something_else(small_pack, tmp_path):
    target = tmp_path / "busy"
    target.mkdir()
    (target / "keep.txt").write_text("not a pack")
    run = subprocess.run(["bash", str(small_pack["out"] / "install.sh"), str(target)], capture_output=True,
                         text=True, env=dict(os.environ, ORACLE_PACK_PYTHON=sys.executable), timeout=120)
    assert run.returncode == 2 and "is not empty and holds no oracle pack" in run.stderr
    assert (target / "keep.txt").read_text() == "not a pack"


def test_a_launcher_without_an_installed_site_says_to_run_install_sh(small_pack, tmp_path):
    pack = tmp_path / "fresh"
    shutil.copytree(small_pack["out"], pack)
    run = subprocess.run([str(pack / "bin" / "vllm"), "--version"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and f"run: bash {pack}/install.sh" in run.stderr


def test_a_rerun_resumes_and_a_wheel_cache_is_reused_by_exact_name_and_version(small_pack, tmp_path):
    out = tmp_path / "from-cache"
    run = _conformance("envs", "pack", "vllm", "--python", "3.12", "--platform", PLATFORM, "--out", str(out),
                       "--only", "tabulate", "packaging", "--wheel-cache", str(small_pack["out"] / "wheels"))
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("(cache)") == 2 and "(download)" not in run.stdout
    rerun = _conformance("envs", "pack", "vllm", "--python", "3.12", "--platform", PLATFORM, "--out", str(out),
                         "--only", "tabulate")
    assert rerun.returncode == 0 and "(pack)" in rerun.stdout
    assert "removed packaging-" in rerun.stdout  # not part of the new pack
    assert [w.name.split("-")[0] for w in (out / "wheels").glob("*.whl")] == ["tabulate"]
    freeze = small_pack["freeze"]
    other = Pin("tabulate", "0.0.1")
    cached = next((small_pack["out"] / "wheels").glob("tabulate-*.whl"))
    assert wheel_matches(cached, freeze["tabulate"], Target("3.12", PLATFORM))
    assert not wheel_matches(cached, other, Target("3.12", PLATFORM))


def test_use_host_globs_leave_packages_to_the_host_as_deviations_and_need_keeps_one(tmp_path):
    freeze = _vllm_freeze()
    nvidia = sorted(k for k in freeze if k.startswith("nvidia-"))
    assert "nvidia-nccl-cu13" in nvidia and len(nvidia) > 1
    host = {"nvidia-nccl-cu13": Pin("nvidia-nccl-cu13", "2.28.9"),
            "torch": Pin("torch", freeze["torch"].version + "+cu130"),  # a local label is another build
            "tabulate": Pin("tabulate", freeze["tabulate"].version + ".0")}  # PEP 440: the same version
    req = env_pack.PackRequest(engine=resolve_engine("vllm"), target=Target("3.12", PLATFORM), out=tmp_path,
                               use_host=["NVIDIA_*"], need=["nvidia-nccl-cu13"])
    keep, left, devs = env_pack.select(freeze, host, req)
    kept = {p.key for p in keep}
    assert "nvidia-nccl-cu13" in kept and not (set(nvidia) - {"nvidia-nccl-cu13"}) & kept
    assert {d["name"] for d in devs} == {freeze[k].name for k in nvidia} - {freeze["nvidia-nccl-cu13"].name}
    assert all(d["host_version"] == "not in the host freeze" for d in devs)
    assert "pip" not in kept and "jsonschema" in kept and "pyyaml" in kept  # the probe's needs stay
    assert "torch" in kept and "tabulate" not in kept

    req.need = []
    _keep, _left, devs = env_pack.select(freeze, host, req)
    nccl = next(d for d in devs if canonicalize_name(d["name"]) == "nvidia-nccl-cu13")
    assert (nccl["pack_version"], nccl["host_version"]) == (freeze["nvidia-nccl-cu13"].version, "2.28.9")


def test_a_package_without_a_wheel_for_the_target_is_named_and_nothing_final_is_written(tmp_path):
    freeze = _vllm_freeze()
    out = tmp_path / "win"
    run = _conformance("envs", "pack", "vllm", "--python", "3.12", "--platform", "win_amd64", "--out", str(out),
                       "--only", "uvloop", "tabulate")
    assert run.returncode == 2
    assert f"uvloop=={freeze['uvloop'].version}: no wheel for cp312 on win_amd64" in run.stderr
    assert "Traceback" not in run.stderr and "NO WHEEL" in run.stdout
    assert not (out / "oracle-pack.json").exists() and not (out / "install.sh").exists()
    assert [w.name.split("-")[0] for w in (out / "wheels").glob("*.whl")] == ["tabulate"]  # kept for a rerun


@pytest.mark.parametrize("argv, env, message", [
    (["no-such-engine"], {}, "no-such-engine"),
    (["reference"], {}, "reference plans in no venv of its own"),
    (["vllm"], {"DFLASH_CONFORMANCE_CACHE": "{tmp}/empty-cache"}, "is missing; build it first with `conformance envs install vllm`"),
    (["vllm", "--host-freeze", "{tmp}/no-such-freeze.txt"], {}, "--host-freeze {tmp}/no-such-freeze.txt: no such file"),
    (["vllm", "--wheel-cache", "{tmp}/no-such-dir"], {}, "--wheel-cache {tmp}/no-such-dir: no such directory"),
    (["vllm", "--deviation-env", "NOVALUE"], {}, "--deviation-env NOVALUE: give NAME=VALUE"),
    (["vllm", "--python", "twelve"], {}, "--python twelve: give a CPython minor version"),
    (["vllm", "--use-host", "nvida-*"], {}, "--use-host nvida-*: matches no package of vllm's venv"),
])
def test_bad_input_is_a_clear_message_and_exit_2(tmp_path, capsys, monkeypatch, argv, env, message):
    if "--use-host" in argv:
        _vllm_freeze()  # judged against the venv's packages
    for k, v in env.items():
        monkeypatch.setenv(k, v.format(tmp=tmp_path))
    args = [a.format(tmp=tmp_path) for a in argv]
    python = ["--python", "3.12"] if "--python" not in args else []
    assert main(["envs", "pack", *args, *python, "--platform", PLATFORM, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message.format(tmp=tmp_path) in err and "Traceback" not in err
    assert not (tmp_path / "out" / "oracle-pack.json").exists()


def test_only_names_a_package_the_venv_lacks(tmp_path, capsys):
    _vllm_freeze()
    assert main(["envs", "pack", "vllm", "--python", "3.12", "--platform", PLATFORM, "--out", str(tmp_path),
                 "--only", "no-such-package"]) == 2
    assert "--only no-such-package: not in vllm's venv" in capsys.readouterr().err


def test_sglangs_launchers_run_its_server_module_with_the_deviation_args(tmp_path):
    if oracle_env(resolve_engine("sglang")).state() != "ready":
        pytest.skip("SGLang oracle venv not built (conformance envs install sglang)")
    run = _conformance("envs", "pack", "sglang", "--python", "3.12", "--platform", PLATFORM, "--out", str(tmp_path),
                       "--only", "tabulate", "--deviation-arg=--probe-flag")
    assert run.returncode == 0, run.stderr
    text = (tmp_path / "bin" / "sglang-launch-server").read_text()
    assert "extra=(--probe-flag)\n" in text
    assert 'exec "${ORACLE_PACK_PYTHON:-python3}" -m sglang.launch_server "$@" ${extra[@]+"${extra[@]}"}' in text
    python = (tmp_path / "bin" / "python").read_text()   # the manifest's {sglang_python}
    assert 'if [ "${1:-}" = -m ] && [ "${2:-}" = sglang.launch_server ]; then extra=(--probe-flag); fi\n' in python
    assert 'exec "${ORACLE_PACK_PYTHON:-python3}"  "$@" ${extra[@]+"${extra[@]}"}' in python
    doc = json.loads((tmp_path / "oracle-pack.json").read_text())
    assert doc["engine"] == "sglang" and doc["deviations"][0]["applies_to"] == ["sglang-launch-server", "python -m sglang.launch_server"]
