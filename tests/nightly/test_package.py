"""`conformance package` and `conformance verify`: a complete package is accepted; a tampered observation,
a skipped case and a package judged against other goldens are refused, each saying why."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import paths
from conformance.cli.main import main

from tests.nightly.conftest import conformance_run


@pytest.fixture
def package(sharded_runs, tmp_path) -> Path:
    pkg = tmp_path / "pkg"
    assert main(["package", str(sharded_runs["all"]), "--out", str(pkg)]) == 0
    return pkg


def test_a_complete_package_is_accepted(package, sharded_runs, tmp_path, capsys):
    env = json.loads((package / "environment.json").read_text())
    assert {e["name"] for e in env["engines"]} == {"reference", "port-seed-bugs"}
    assert env["hosts"][0]["host"] and env["hosts"][0]["device"] and env["goldens_revisions"][0].startswith("sha256:")
    assert env["cases"] and env["framework_commits"]
    manifest = json.loads((package / "manifest.json").read_text())
    run = manifest["runs"][0]
    assert {f"runs/{run}/observations.jsonl", f"runs/{run}/junit.xml", "environment.json", "verdicts.jsonl"} \
        <= set(manifest["files"])
    capsys.readouterr()
    assert main(["verify", str(package)]) == 0
    assert "accepted" in capsys.readouterr().out
    shards = tmp_path / "shards"   # the two shards of one nightly make a complete package too
    assert main(["package", str(sharded_runs["1/2"]), str(sharded_runs["2/2"]), "--out", str(shards)]) == 0
    assert main(["verify", str(shards)]) == 0


def _tamper(pkg: Path) -> Path:
    """The reference's seats on seed-unified-pool-c32-k8 set to 1 in the packaged observations."""
    (run,) = json.loads((pkg / "manifest.json").read_text())["runs"]
    path = pkg / "runs" / run / "observations.jsonl"
    lines = []
    for line in path.read_text().splitlines():
        obs = json.loads(line)
        if (obs["engine"]["name"], obs["case_id"]) == ("reference", "seed-unified-pool-c32-k8"):
            obs["memory"]["max_concurrency"] = 1
        lines.append(json.dumps(obs, sort_keys=True))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_tampered_observation_is_refused(package, capsys):
    path = _tamper(package)
    assert main(["verify", str(package)]) == 1
    err = capsys.readouterr().err
    assert f"{path.relative_to(package).as_posix()}: sha256 differs from the manifest's" in err
    manifest = json.loads((package / "manifest.json").read_text())   # the manifest rewritten to match
    manifest["files"][path.relative_to(package).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    (package / "manifest.json").write_text(json.dumps(manifest))
    assert main(["verify", str(package)]) == 1
    err = capsys.readouterr().err
    assert "memory.seats_equal_vllm of reference on seed-unified-pool-c32-k8: fail (re-judged only)" in err
    assert "Traceback" not in err


def test_a_skipped_case_is_refused(sharded_runs, tmp_path, capsys):
    run_dir = conformance_run(tmp_path / "seed-only", "--cases", "seed-*")   # the drafting table left out
    pkg = tmp_path / "pkg"
    assert main(["package", str(run_dir), "--out", str(pkg)]) == 0
    assert main(["verify", str(pkg)]) == 1
    err = capsys.readouterr().err
    assert "case drafting-table-dflash of the pinned suite: not in the package (skipped)" in err
    half = tmp_path / "half"   # one shard of two: the other half's cells are missing
    assert main(["package", str(sharded_runs["1/2"]), "--out", str(half)]) == 0
    assert main(["verify", str(half)]) == 1
    assert "no observation (skipped, or its shard is not in the package)" in capsys.readouterr().err


def test_a_package_judged_against_other_goldens_is_refused(package, tmp_path):
    goldens = tmp_path / "other-goldens"   # a checkout whose goldens moved since the package was judged
    shutil.copytree(paths.goldens_dir(), goldens)
    one = next(p for p in sorted(goldens.rglob("*.json")))
    one.write_text(one.read_text().replace("\n", "\n ", 1))
    env = dict(os.environ, DFLASH_CONFORMANCE_GOLDENS=str(goldens), PYTHONPATH=str(paths.REPO_ROOT))
    run = subprocess.run([sys.executable, "-m", "conformance", "verify", str(package)], capture_output=True, text=True,
                         env=env, timeout=600)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "(a package judged against other goldens)" in run.stderr


def test_a_directory_that_is_no_package(tmp_path, capsys):
    assert main(["verify", str(tmp_path)]) == 2
    assert "no manifest: not a package" in capsys.readouterr().err
