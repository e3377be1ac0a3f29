"""A judged throughput run leaves its golden used: in a pytester dir, a suite calls the GPU test's
`judge_against_golden` on the golden run's committed observation (suites/results/throughput),
first under --snapshot-update (records it), then plainly (judged against itself: inside the bands),
each in a process of its own (the GPU suite imports torch, which an in-process run would unload).
The plain run must exit 0: before the judgement told syrupy it read the golden, syrupy reported the
golden unused and a passing nightly run exited 1. A golden edited by hand fails with its path."""

from __future__ import annotations

import json

import pytest

from conformance import paths

pytest_plugins = ["pytester"]

OBSERVATION = paths.REPO_ROOT / "suites" / "results" / "throughput" / "throughput-reference.json"
INNER = f'''
import importlib.util, json
from pathlib import Path

spec = importlib.util.spec_from_file_location("_gpu_suite", {str(paths.REPO_ROOT / "suites" / "throughput" / "test_throughput_gpu.py")!r})
gpu_suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_suite)
OBS = json.loads(Path({str(OBSERVATION)!r}).read_text())


def test_judged(golden):
    gpu_suite.judge_against_golden(golden, OBS)
'''


def test_a_judged_run_uses_its_golden_and_exits_zero(pytester: pytest.Pytester, monkeypatch) -> None:
    goldens = pytester.path / "goldens"
    monkeypatch.setenv("DFLASH_CONFORMANCE_GOLDENS", str(goldens))
    (pytester.path / "throughput").mkdir()
    (pytester.path / "throughput" / "test_tp.py").write_text(INNER)
    args = ("throughput", "-p", "no:cacheprovider", "-s")
    recorded = pytester.runpytest_subprocess(*args, "--snapshot-update")
    recorded.assert_outcomes(passed=1)
    [golden] = goldens.rglob("*.json")
    judged = pytester.runpytest_subprocess(*args)
    judged.assert_outcomes(passed=1)
    assert judged.ret == 0, judged.stdout.str()[-2000:]
    assert "throughput vs golden: pass" in judged.stdout.str()
    assert "unused" not in judged.stdout.str()

    doc = json.loads(golden.read_text())
    golden.write_text(json.dumps(doc, indent=4))                 # the same figures, not as recorded
    edited = pytester.runpytest_subprocess(*args)
    edited.assert_outcomes(failed=1)
    assert "is not as --snapshot-update writes it" in edited.stdout.str()
