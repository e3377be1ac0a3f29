"""Issue 28 item 2: schema-valid observations that crashed judging or rendering (no index.html, no
junit.xml, `latest` not moved, the other engines' results lost; `conformance report` failing the
same way on every retry; through pytest, no report and no summary line). Now a value no engine can
mean is an `error` observation naming the field, a check that raises is that check's failing
verdict, and the run directory always ends with a valid index.html and junit.xml."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conformance import paths
from conformance.checks.check_table import CHECKS, judge_run
from conformance.documents import observation
from conformance.documents.cases import find_case
from conformance.run import exit_status

from ._cli import cli
from ._forge import forged_engine, reference_observation

CASE = "tiny-dflash-c4-k8"


@pytest.fixture(scope="module")
def reference_obs() -> dict:
    return reference_observation(CASE)


def _text(obs: dict, **replace: str) -> str:
    """The observation as JSON text with raw replacements (what json.dumps would not write)."""
    text = json.dumps(dict(obs, case_id="@CASE@"))
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


def _attacks(obs: dict) -> dict[str, tuple[str, str]]:
    """name -> (observation text, the field its error must name)."""
    step = obs["trace"]["steps"][0]["total_num_scheduled_tokens"]
    deep = '{"a": ' * 520 + "1" + "}" * 520
    return {
        "float_step": (_text(obs, **{f'"total_num_scheduled_tokens": {step}': f'"total_num_scheduled_tokens": {step}.0'}),
                       "trace.steps[0].total_num_scheduled_tokens"),
        "surrogate_message": (_text(dict(obs, message="note \ud800 here")), "message"),
        "surrogate_version": (_text(dict(obs, engine={"name": "x", "version": "1.0\ud800"})), "engine.version"),
        "huge_budget": (_text(obs, **{'"lookahead_tokens": ': '"lookahead_tokens": ' + "9" * 400 + ', "x_": '}),
                        "budget.lookahead_tokens"),
        "huge_ledger": (_text(obs, **{'"draft_kv": ': '"draft_kv": ' + "9" * 400 + ', "x_": '}),
                        "memory.ledger_bytes.draft_kv"),
        "deep_provenance": (_text(obs, **{'"mapping": {': '"mapping": {"deep": ' + deep + ", "}),
                            "provenance.mapping.deep"),
    }


def _junit_ok(run_dir: Path) -> ET.Element:
    return ET.parse(run_dir / "junit.xml").getroot()


def test_each_hostile_observation_is_an_error_naming_the_field_and_the_run_is_reported(tmp_path, reference_obs):
    engines = {name: forged_engine(tmp_path / "engines", name.replace("_", "-"), text)
               for name, (text, _) in _attacks(reference_obs).items()}
    out = tmp_path / "reports"
    refs = ",".join(["reference"] + [str(p) for p in engines.values()])
    ran = cli(["run", "--engines", refs, "--cases", CASE, "--out", str(out)], tmp_path, timeout_s=300)
    assert "Traceback" not in ran.err and ran.rc == exit_status.ENGINE_ERROR, ran.out[-3000:] + ran.err[-3000:]
    run_dir = out / os.readlink(out / "latest")
    assert (run_dir / "index.html").stat().st_size > 1000
    root = _junit_ok(run_dir)
    by_engine = {}
    for line in (run_dir / "observations.jsonl").read_text().splitlines():
        o = json.loads(line)
        by_engine[o["engine"]["name"]] = o
    assert by_engine["reference"]["status"] == "ok"   # the other engines' results are kept
    for name, (_, field) in _attacks(reference_obs).items():
        o = by_engine[name.replace("_", "-")]
        assert o["status"] == "error", (name, o["status"])
        assert f": {field}" in o["message"], (name, o["message"][:1000])
    assert root.get("errors") == str(len(engines))
    again = cli(["report", str(run_dir)], tmp_path, timeout_s=120)
    assert again.rc == 0 and "Traceback" not in again.err, again.err[-2000:]


def test_validation_walks_a_deep_document_without_recursion():
    from conformance.documents.schemas.values import MAX_NESTING

    doc = cur = {}
    for _ in range(100_000):
        cur["a"] = {}
        cur = cur["a"]
    with pytest.raises(observation.ObservationError) as err:
        observation.validate(doc, "deep")
    assert f"nested deeper than {MAX_NESTING} levels" in str(err.value)


def test_a_check_that_raises_is_a_failing_verdict_naming_the_check(reference_obs):
    """A check that cannot judge a document (a figure of the wrong type, which validation now refuses
    at the door) fails by name; every other verdict of the run is still there."""
    from conformance.checks.check_table import CHECK_RAISED

    case = dict(find_case(CASE).spec, id=CASE)
    broken = copy.deepcopy(reference_obs)
    broken["engine"]["name"] = "port"
    broken["trace"]["steps"][0]["num_scheduled_requests"] = "many"   # what no schema-valid engine sends
    vllm = copy.deepcopy(reference_obs)
    vllm["engine"] = {"name": "vllm", "version": "0.33.0"}

    def lookup(suite, engine, case_id):
        from conformance.documents.golden_doc import GoldenMissingError

        raise GoldenMissingError("none")

    verdicts = judge_run([case], {(CASE, "port"): broken, (CASE, "vllm"): vllm},
                         {"port": "under-test", "vllm": "oracle"}, lookup)
    raised = [v for v in verdicts if v.cause == CHECK_RAISED]
    assert raised and all(v.outcome == "fail" for v in raised)
    by_check = {v.check: v for v in raised}
    assert "the check trace.steps_within_budget could not judge this observation: TypeError" in \
        by_check["trace.steps_within_budget"].message
    judged = {v.check for v in verdicts if v.engine == "port"}
    assert judged == {c.name for c in CHECKS if c.applies("under-test", CASE)}


def test_conformance_report_rerenders_a_run_recorded_before_the_rules(tmp_path, reference_obs):
    """A run directory written before validation refused these values (observations.jsonl as the old
    code wrote it) re-renders: each such line is its engine's error observation."""
    run_dir = tmp_path / "20260101-000000"
    run_dir.mkdir()
    lines = [json.dumps(reference_obs)]
    for name, (text, field) in _attacks(reference_obs).items():
        doc = json.loads(text.replace("@CASE@", CASE))
        doc["engine"]["name"] = name
        lines.append(json.dumps(doc))
    (run_dir / "observations.jsonl").write_text("\n".join(lines) + "\n")
    ran = cli(["report", str(run_dir)], tmp_path, timeout_s=120)
    assert ran.rc == 0 and "Traceback" not in ran.err, ran.out[-2000:] + ran.err[-2000:]
    root = _junit_ok(run_dir)
    assert int(root.get("errors")) == len(_attacks(reference_obs))
    assert "the observation recorded here is not valid" in (run_dir / "index.html").read_text()


def test_pytest_session_with_a_hostile_engine_writes_its_report_and_summary_line(tmp_path, reference_obs):
    text, _ = _attacks(reference_obs)["surrogate_message"]
    engine = forged_engine(tmp_path / "e", "surrogate", text)
    report = tmp_path / "parity"
    env = dict(os.environ, PYTHONPATH=str(paths.REPO_ROOT), DFLASH_CONFORMANCE_CACHE=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-m", "pytest", "suites/budget", "--engines", str(engine), "--cases", CASE,
                           "--parity-report", str(report), "-p", "no:randomly", "-p", "no:cacheprovider", "-q"],
                          cwd=str(paths.REPO_ROOT), env=env, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in done.stderr and "INTERNALERROR" not in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
    assert done.returncode == 1, done.stdout[-3000:]
    assert " failed" in done.stdout.strip().splitlines()[-1], done.stdout[-1000:]   # pytest's summary line
    assert (report / "index.html").stat().st_size > 1000
    assert "lone surrogate" in (report / "index.html").read_text()
