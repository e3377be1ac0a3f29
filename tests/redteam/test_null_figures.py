"""Issue 28 item 3: checks passed on figures the engine did not report. A null ledger passed
`memory.inside_bound` ("ledger 0 B within the bound") and `memory.ledger_holds_seats` ("4 seats x
0 B"); a null budget passed `trace.steps_within_budget` with a 100,000-token step. Now a null
figure fails the check that needs it, naming the field."""

from __future__ import annotations

import copy
import os
import xml.etree.ElementTree as ET

import pytest

from conformance.checks import memory as memory_checks
from conformance.checks.row import CheckInput
from conformance.checks.trace import steps_within_budget
from conformance.documents.cases import find_case

from ._cli import cli
from ._forge import forged_engine, reference_observation

CASE = "tiny-dflash-c4-k8"
POOL = ("attention_kv", "recurrent_state", "draft_kv")


@pytest.fixture(scope="module")
def obs() -> dict:
    return reference_observation(CASE)


@pytest.fixture(scope="module")
def spec() -> dict:
    return dict(find_case(CASE).spec, id=CASE)


def _null_ledger(obs: dict) -> dict:
    bad = copy.deepcopy(obs)
    bad["memory"]["ledger_bytes"].update({c: None for c in POOL})
    return bad


def test_a_null_ledger_fails_inside_bound_and_ledger_holds_seats_naming_the_fields(obs, spec):
    bad = _null_ledger(obs)
    for check in (memory_checks.inside_the_bound, memory_checks.ledger_holds_seats):
        verdict = check(CheckInput(bad, spec))
        assert verdict.outcome == "fail", verdict
        assert all(f"memory.ledger_bytes.{c}" in verdict.message for c in POOL), verdict.message
        assert "did not report" in verdict.message


def test_null_per_sequence_bytes_fail_ledger_holds_seats(obs, spec):
    bad = copy.deepcopy(obs)
    bad["memory"]["per_sequence"].update(attention_kv_bytes=None, recurrent_state_bytes=None, draft_kv_bytes=None)
    bad["memory"]["ledger_bytes"].update({c: 0 for c in POOL})
    verdict = memory_checks.ledger_holds_seats(CheckInput(bad, spec))
    assert verdict.outcome == "fail" and "memory.per_sequence.draft_kv_bytes" in verdict.message, verdict


def test_a_null_budget_fails_steps_within_budget_with_a_100000_token_step(obs):
    bad = copy.deepcopy(obs)
    bad["budget"] = {k: None for k in bad["budget"]}
    bad["trace"]["steps"][0]["total_num_scheduled_tokens"] = 100_000
    verdict = steps_within_budget(CheckInput(bad, {}, None, ""))   # no vLLM document: only the engine's own budget
    assert verdict.outcome == "fail", verdict
    assert "budget.max_num_scheduled_tokens" in verdict.message and "budget.max_active_seqs" in verdict.message


def test_null_seat_figures_fail_explains_short_seats(obs):
    bad = copy.deepcopy(obs)
    bad["memory"]["max_concurrency"] = None
    verdict = memory_checks.explains_short_seats(CheckInput(bad, {}))
    assert verdict.outcome == "fail" and "memory.max_concurrency" in verdict.message, verdict


def test_null_per_sequence_fails_draft_kv_scaling():
    small, large = reference_observation("seed-draft-kv-c8"), reference_observation("seed-draft-kv-c32")
    small_spec = find_case("seed-draft-kv-c8").spec
    assert memory_checks.draft_kv_scaling(CheckInput(small, small_spec, partner=large)).outcome == "pass"
    for o in (small, large):
        o["memory"]["per_sequence"]["attention_kv_bytes"] = None
    verdict = memory_checks.draft_kv_scaling(CheckInput(small, small_spec, partner=large))
    assert verdict.outcome == "fail" and "memory.per_sequence.attention_kv_bytes" in verdict.message, verdict


def test_a_run_with_a_null_ledger_fails_both_memory_checks(obs, tmp_path):
    engine = forged_engine(tmp_path / "e", "null-ledger", _null_ledger(obs))
    out = tmp_path / "reports"
    ran = cli(["run", "--engines", str(engine), "--cases", CASE, "--out", str(out)], tmp_path, timeout_s=120)
    assert ran.rc == 1 and "Traceback" not in ran.err, ran.out[-2000:] + ran.err[-2000:]
    root = ET.parse(out / os.readlink(out / "latest") / "junit.xml").getroot()
    failed = {tc.get("name"): tc.find("failure").get("message") for tc in root.iter("testcase")
              if tc.find("failure") is not None}
    for check in ("memory.inside_bound", "memory.ledger_holds_seats"):
        assert "memory.ledger_bytes.attention_kv" in failed[f"{check}[{CASE}]"], failed
