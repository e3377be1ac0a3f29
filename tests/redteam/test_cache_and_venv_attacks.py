"""Issue 28 item 10, through the real `conformance` command on a cache of the test's own:

- pruning `<cache>/logs` while a plan runs never deletes that plan's directory (its owner is alive),
  and still prunes it once the plan is over;
- a venv left without pip by an interrupted build is detected and built again, with a hint;
- a venv build does not fail because the checkout (with its egg-info) is on PYTHONPATH;
- an engine `version` of `1.0/../../../victim` is refused by `engines check` and `envs install`,
  and nothing outside the cache is removed.

The venv engine installs a wheel built here (no index: the machine may be offline); the wheel also
carries stand-ins for the probe's own imports so that the build never reaches for the network.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from conformance import paths
from conformance.harness import log_dirs

from ._cli import cli, project_env

CASE = "tiny-dflash-c4-k8"


def test_pruning_logs_spares_a_running_plan_and_prunes_it_after(tmp_path, monkeypatch):
    monkeypatch.setenv("DFLASH_CONFORMANCE_CACHE", str(tmp_path / "cache"))
    engine = tmp_path / "slow.yaml"
    engine.write_text(json.dumps({"name": "slow", "role": "under-test", "version": "1",
                                  "plan": {"command": {"argv": ["sh", "-c", "sleep 4; exit 1"], "timeout_s": 60}}}))
    proc = subprocess.Popen([sys.executable, "-m", "conformance", "plan", "--engine", str(engine), "--case", CASE],
                            env=project_env(tmp_path), cwd=str(paths.REPO_ROOT), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    root = tmp_path / "cache" / "logs"
    deadline = time.monotonic() + 60
    while not list(root.glob("slow-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    (plan_dir,) = list(root.glob("slow-*"))
    time.sleep(0.1)
    for _ in range(log_dirs.MAX_COUNT + 5):   # newer directories: the plan's is past MAX_COUNT
        log_dirs.new_log_dir("filler")
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in err, err[-3000:]
    assert plan_dir.is_dir(), "the running plan's log directory was pruned"
    obs = json.loads(out[:out.rindex("}") + 1])
    assert obs["status"] == "error" and "exited with code 1" in obs["message"], obs["message"]
    for _ in range(log_dirs.MAX_COUNT):       # its owner is gone: past MAX_COUNT newer ones, it goes
        time.sleep(0.002)
        log_dirs.new_log_dir("filler")
    assert not plan_dir.exists(), "a finished plan's directory past MAX_COUNT was kept"


def _wheel(tmp_path: Path, name: str, version: str) -> Path:
    files = {f"{name}/__init__.py": f"__version__ = {version!r}\n",
             "jsonschema.py": "", "yaml.py": "",   # the probe's imports, so that no index is needed
             f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{name}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                  "Tag: py3-none-any\n"}
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{name}-{version}.dist-info/RECORD,,")
    files[f"{name}-{version}.dist-info/RECORD"] = "\n".join(record) + "\n"
    out = tmp_path / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return out


def _venv_engine(tmp_path: Path, version: str = "1.0") -> Path:
    wheel = _wheel(tmp_path, "fakeoracle", "1.0")
    engine = tmp_path / "fakeoracle.yaml"
    engine.write_text(json.dumps({"name": "fakeoracle", "role": "under-test", "version": version,
                                  "plan": {"module": {"name": "fakeoracle", "environment": "venv",
                                                      "pip": [str(wheel)]}}}))
    return engine


def test_an_interrupted_venv_build_is_rebuilt_with_a_hint(tmp_path):
    engine = _venv_engine(tmp_path)
    venv = tmp_path / "cache" / "oracles" / "fakeoracle-1.0"
    venv.parent.mkdir(parents=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)   # Ctrl-C before pip
    ran = cli(["envs", "install", str(engine)], tmp_path, timeout_s=300)
    assert ran.rc == 0, (ran.out + ran.err)[-3000:]
    assert "has no pip" in ran.out and "building again" in ran.out, ran.out
    assert (venv / "conformance-env.json").is_file()


def test_a_venv_builds_with_the_checkout_and_its_egg_info_on_pythonpath(tmp_path):
    engine = _venv_engine(tmp_path)
    checkout = tmp_path / "checkout"   # what `pip install -e .` leaves in a checkout
    info = checkout / "dflash_conformance.egg-info"
    info.mkdir(parents=True)
    (info / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: dflash-conformance\nVersion: 0.1.0\n")
    (info / "requires.txt").write_text("torch>=2.4\nsyrupy>=4.6\n")
    ran = cli(["envs", "install", str(engine)], tmp_path, timeout_s=300,
              PYTHONPATH=os.pathsep.join([str(paths.REPO_ROOT), str(checkout)]))
    assert ran.rc == 0, (ran.out + ran.err)[-3000:]
    assert (tmp_path / "cache" / "oracles" / "fakeoracle-1.0" / "conformance-env.json").is_file()


def test_a_version_that_climbs_out_of_the_cache_is_refused_and_removes_nothing(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    engine = _venv_engine(tmp_path, version="1.0/../../../victim")
    check = cli(["engines", "check", str(engine)], tmp_path)
    assert check.rc != 0 and "version" in check.err + check.out and "1.0/../../../victim" in check.err + check.out, \
        (check.out + check.err)[-2000:]
    ran = cli(["envs", "install", str(engine)], tmp_path, timeout_s=120)
    assert ran.rc != 0 and "Traceback" not in ran.err, (ran.out + ran.err)[-2000:]
    assert (victim / "precious.txt").read_text() == "keep me", "the build removed a directory outside the cache"
