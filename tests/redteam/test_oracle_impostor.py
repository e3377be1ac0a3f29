"""Issue 28 item 1: an engine under test named like an oracle. It was judged against itself (its own
observation stood in for vLLM's where vLLM had no golden) and `--snapshot-update` rewrote vLLM's
golden from it; a copy of vllm.yaml registered through an entry point silently replaced the shipped
vLLM. Now a shipped oracle's name is reserved, two engines of one name are refused (entry points
included), and an oracle's document is only ever an engine of role oracle."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

from conformance import paths
from conformance.checks.check_table import judge_run
from conformance.documents.cases import find_case
from conformance.documents.golden_doc import GoldenMissingError

from ._cli import cli
from ._forge import forged_engine, reference_observation

CASE = "tiny-dflash-c4-k8"


def _absurd(obs: dict) -> dict:
    """What the issue's impostor reported: a 1-token budget, lookahead 8, 999 seats."""
    bad = copy.deepcopy(obs)
    bad["budget"]["max_num_scheduled_tokens"] = 1
    bad["budget"]["lookahead_tokens"] = 8
    bad["memory"]["max_concurrency"] = 999
    return bad


def _site_with_entry_points(tmp_path: Path, files: dict[str, Path]) -> dict[str, str]:
    """An installed package registering `files` (entry point name -> engine file) in the group."""
    site = tmp_path / "site"
    (site / "impostor_pkg").mkdir(parents=True)
    (site / "impostor_pkg" / "__init__.py").write_text(
        "".join(f"def {n}():\n    return {str(p)!r}\n" for n, p in files.items()))
    dist = site / "impostor_pkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: impostor-pkg\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[dflash_conformance.engines]\n"
                                           + "".join(f"{n} = impostor_pkg:{n}\n" for n in files))
    return {"PYTHONPATH": os.pathsep.join([str(site), str(paths.REPO_ROOT)])}


def test_an_under_test_engine_named_vllm_is_refused_naming_the_file(tmp_path):
    engine = forged_engine(tmp_path / "port", "vllm", _absurd(reference_observation()), version="0.33.0")
    ran = cli(["run", "--engines", f"reference,{engine}", "--cases", CASE, "--out", str(tmp_path / "r")], tmp_path,
              timeout_s=120)
    assert ran.rc == 2 and "Traceback" not in ran.err, ran.out[-2000:] + ran.err[-2000:]
    assert f"{engine}: name: 'vllm' is reserved for the shipped oracle vllm" in ran.err, ran.err
    assert "role under-test" in ran.err
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").glob("*/observations.jsonl"))


def test_a_copy_of_vllm_yaml_by_path_is_refused(tmp_path):
    copy_file = tmp_path / "vllm.yaml"
    shutil.copy(paths.PACKAGE_DIR / "engines" / "engine_files" / "vllm.yaml", copy_file)
    ran = cli(["engines", "check", str(copy_file)], tmp_path)
    assert ran.rc == 2 and f"{copy_file}: name: 'vllm' is reserved" in ran.out, ran.out + ran.err
    shipped = cli(["engines", "check", str(paths.PACKAGE_DIR / "engines" / "engine_files" / "vllm.yaml")], tmp_path)
    assert shipped.rc == 0, shipped.out + shipped.err


def test_an_entry_point_copy_of_vllm_does_not_replace_the_shipped_one(tmp_path):
    copy_file = tmp_path / "copied" / "vllm.yaml"
    copy_file.parent.mkdir()
    shutil.copy(paths.PACKAGE_DIR / "engines" / "engine_files" / "vllm.yaml", copy_file)
    env = _site_with_entry_points(tmp_path, {"fastvllm": copy_file})
    ran = cli(["run", "--no-build", "--cases", CASE, "--out", str(tmp_path / "r")], tmp_path, timeout_s=120, **env)
    assert ran.rc == 2 and "Traceback" not in ran.err, ran.out[-2000:] + ran.err[-2000:]
    assert "entry point fastvllm = impostor_pkg:fastvllm" in ran.err and str(copy_file) in ran.err, ran.err


def test_two_entry_points_of_one_name_are_refused_in_a_default_run(tmp_path):
    obs = reference_observation()
    a = forged_engine(tmp_path / "a", "twin", obs)
    b = forged_engine(tmp_path / "b", "twin", obs)
    env = _site_with_entry_points(tmp_path, {"twin_a": a, "twin_b": b})
    ran = cli(["run", "--no-build", "--cases", CASE, "--out", str(tmp_path / "r")], tmp_path, timeout_s=120, **env)
    assert ran.rc == 2 and "two engines are named 'twin'" in ran.err, ran.out[-2000:] + ran.err[-2000:]
    assert str(a) in ran.err and str(b) in ran.err


def test_judging_never_takes_an_under_test_engines_observation_as_the_oracles():
    """An engine under test named `vllm` (however it got into a run: an old run directory, a file
    built in code) is never vLLM's document: with no vLLM golden, the parity checks fail for want
    of one instead of comparing the engine with itself."""
    obs = reference_observation()
    impostor = _absurd(obs)
    impostor["engine"] = {"name": "vllm", "version": "0.33.0"}

    def no_goldens(suite, engine, case_id):
        raise GoldenMissingError(f"no {engine} golden for {case_id}")

    case = dict(find_case(CASE).spec, id=CASE)
    verdicts = judge_run([case], {(CASE, "vllm"): impostor}, {"vllm": "under-test"}, no_goldens)
    by_check = {v.check: v for v in verdicts}
    for check in ("budget.parity_with_vllm", "memory.seats_equal_vllm", "trace.equals_vllm"):
        assert by_check[check].outcome == "fail", (check, by_check[check])
        assert "nothing to compare with" in by_check[check].message
    assert "live vllm" not in " ".join(v.message for v in verdicts)


def test_snapshot_update_never_rewrites_vllms_golden_from_an_engine_under_test(tmp_path):
    """The issue's steps: `pytest suites/budget --engines ./port.yaml --snapshot-update` with a port
    named vllm. vLLM's golden must stay as recorded."""
    goldens = tmp_path / "goldens"
    shutil.copytree(paths.goldens_dir(), goldens)
    (vllm_golden,) = goldens.glob(f"budget/*/*[[]vllm-{CASE}[]].json")
    before = vllm_golden.read_bytes()
    engine = forged_engine(tmp_path / "port", "vllm", _absurd(reference_observation()), version="0.33.0")
    env = dict(os.environ, PYTHONPATH=str(paths.REPO_ROOT), DFLASH_CONFORMANCE_GOLDENS=str(goldens),
               DFLASH_CONFORMANCE_CACHE=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-m", "pytest", "suites/budget", "--engines", str(engine), "--cases", CASE,
                           "--snapshot-update", "-p", "no:randomly", "-p", "no:cacheprovider", "-q"],
                          cwd=str(paths.REPO_ROOT), env=env, capture_output=True, text=True, timeout=300)
    assert vllm_golden.read_bytes() == before, done.stdout[-3000:]
    assert done.returncode != 0, done.stdout[-3000:]
    assert "is reserved for the shipped oracle vllm" in done.stdout + done.stderr, done.stdout[-3000:] + done.stderr[-2000:]
