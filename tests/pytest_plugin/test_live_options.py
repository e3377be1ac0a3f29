"""The live suite's options (what the old throughput suite's environment variables became): the ladder
of a run (`--live-ladder`, both faces), the transformers peer (`--live-peer transformers`), and the
regression a slowed engine shows against its own golden, on the shipped CPU case with real processes."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conformance import paths
from conformance.checks import live_checks as checks
from conformance.documents.cases import load_case
from conformance.documents.live_spec import live_spec, parse_ladder, with_ladder
from conformance.engines.registry import resolve_engine
from conformance.harness.live_measure import measure
from conformance.pytest_plugin.live_golden import live_golden_doc
from conformance.run.rundir import load_report, resolve_run_dir

CASE = paths.live_cases_dir() / "live-tiny-dflash-cpu.yaml"
PYTEST = [sys.executable, "-m", "pytest", "suites/live", "-p", "no:cacheprovider", "-p", "no:randomly", "-q"]


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, cwd=str(paths.REPO_ROOT), timeout=600)


@pytest.mark.parametrize("text", ["4,1", "1,1", "0,2", "x", ""])
def test_a_bad_ladder_is_refused_naming_the_option(text):
    with pytest.raises(ValueError, match="--live-ladder"):
        parse_ladder(text, "--live-ladder")


def test_a_ladder_replaces_the_case_s_concurrencies_and_nothing_else():
    case = load_case(CASE)
    short = with_ladder(case, (2,))
    assert live_spec(short.spec).concurrencies == (2,) and live_spec(case.spec).concurrencies == (1, 2)
    assert short.id == case.id and {k: v for k, v in short.spec.items() if k != "live"} == \
        {k: v for k, v in case.spec.items() if k != "live"}
    assert with_ladder(case, None) is case


def test_both_faces_serve_the_ladder_asked_for_and_refuse_a_bad_one(tmp_path):
    run = _run([sys.executable, "-m", "conformance", "run", "--live", "--cases", "live-tiny-dflash-cpu",
                "--engines", "reference", "--live-ladder", "2", "--out", str(tmp_path / "reports")])
    assert run.returncode in (0, 1), run.stdout[-3000:] + run.stderr[-3000:]
    report = load_report(resolve_run_dir(tmp_path / "reports" / "latest"))
    obs = report.observations[("live-tiny-dflash-cpu", "reference")]
    assert [r["concurrency"] for r in obs["throughput"]["rungs"]] == [2]

    bad = _run([sys.executable, "-m", "conformance", "run", "--live", "--live-ladder", "8,2"])
    assert bad.returncode == 2 and "--live-ladder '8,2'" in bad.stdout + bad.stderr
    bad = _run(PYTEST + ["--engines", "reference", "--cases", "live-tiny-dflash-cpu", "--live-ladder", "8,2"])
    assert bad.returncode == 4 and "--live-ladder '8,2'" in bad.stdout + bad.stderr
    update = _run(PYTEST + ["--engines", "reference", "--cases", "live-tiny-dflash-cpu", "--live-ladder", "2",
                            "--snapshot-update"])
    assert update.returncode == 4 and "holds the case's whole ladder" in update.stdout + update.stderr


def test_the_transformers_peer_runs_beside_the_engines_and_writes_its_ratios(tmp_path):
    """The peer on the suite's CPU case with the reference served in the same session: its observation and
    its ratios to the reference land in the session's store, one ratio per rung both measured."""
    done = _run(PYTEST + ["--engines", "reference", "--cases", "live-tiny-dflash-cpu", "--live-peer", "transformers",
                          "--live-ladder", "1,2", "-k", "transformers", "--basetemp", str(tmp_path / "bt"), "-s"])
    store = tmp_path / "bt" / "observations"   # the session's store (conformance.pytest_plugin.plugin)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = store / "live" / "transformers"
    peer = json.loads((out / "live-tiny-dflash-cpu.json").read_text())
    ratios = json.loads((out / "live-tiny-dflash-cpu-ratios.json").read_text())
    assert peer["engine"]["name"] == "transformers" and peer["status"] == "ok"
    assert [r["concurrency"] for r in peer["throughput"]["rungs"]] == [1, 2]
    assert all(r["num_output_tokens"] == r["concurrency"] * 8 for r in peer["throughput"]["rungs"])   # the case's 8
    assert sorted(ratios) == ["reference"]
    assert sorted(ratios["reference"]["output_tok_per_s_engine_over_transformers"]) == ["1", "2"]
    assert all(v > 0 for v in ratios["reference"]["output_tok_per_s_engine_over_transformers"].values())
    assert "transformers peer on live-tiny-dflash-cpu" in done.stdout


def test_without_the_option_the_peer_is_not_collected():
    listed = _run(PYTEST + ["--engines", "reference", "--cases", "live-tiny-dflash-cpu", "--collect-only"])
    assert "test_transformers_peer" not in listed.stdout and "test_live_golden" in listed.stdout


def _slowed_port(directory: Path, ratio: float) -> Path:
    """The live port's slow-step engine file, sleeping `ratio` x each step's wall time."""
    doc = yaml.safe_load((paths.REPO_ROOT / "examples" / "live-port" / "engine-slow.yaml").read_text())
    doc["live"]["command"] += ["--slow-step-ratio", str(ratio)]
    out = directory / "engine-slowed.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out


def test_a_slowed_engine_fails_its_own_golden_and_the_unchanged_one_does_not(tmp_path):
    """The live port's golden recorded from its sound run; the same port with each step slowed tenfold is
    judged outside the regression band; the sound port judged against its own golden never fails. Six
    waves of one request: on a CPU two waves leave intervals too wide to say more than inconclusive."""
    base = with_ladder(load_case(CASE), (1,))
    case = dataclasses.replace(base, spec={**base.spec, "live": {**base.spec["live"], "num_repeats": 6}})
    spec = dict(case.spec, id=case.id)
    sound = measure(resolve_engine(str(paths.REPO_ROOT / "examples" / "live-port" / "engine.yaml")), case,
                    log_dir=tmp_path / "sound")
    assert sound["status"] == "ok", sound["message"]
    golden = json.loads(json.dumps(live_golden_doc(sound)))
    same = checks.live_golden(sound, golden, spec, False, "")
    assert same.outcome in ("pass", "inconclusive"), (same.message, same.details)   # never a fail on noise
    slowed = measure(resolve_engine(str(_slowed_port(tmp_path, 10))), case, log_dir=tmp_path / "slowed")
    assert slowed["status"] == "ok", slowed["message"]
    slowed["engine"]["name"] = sound["engine"]["name"]
    verdict = checks.live_golden(slowed, golden, spec, False, "")
    assert verdict.failed and "outside the regression band" in verdict.message, verdict.message
