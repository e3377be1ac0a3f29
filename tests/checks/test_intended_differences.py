"""A case's intended differences name the engines they document: a difference of one engine never binds
another (issue: a port that admits what SGLang runs failed a rule written for the reference)."""

from __future__ import annotations

import pytest

from conformance.checks.budget import active_seqs_not_below_sglang, budget_parity_with_vllm
from conformance.checks.memory import seats_equal_vllm
from conformance.checks.row import CheckInput
from conformance.documents import observation
from conformance.documents.cases import find_case, parse_case
from conformance.errors import CaseError


def obs(engine, *, seats, seqs=4, active=4):
    o = observation.new("tiny-sglang-retract", engine, "1", "plan", "h200")
    o["budget"] = {"max_num_batched_tokens": 256, "max_num_scheduled_tokens": 256, "drafting_slots_per_request": 0,
                   "lookahead_tokens": 9, "max_num_seqs": seqs, "max_active_seqs": active}
    o["memory"] = {"bound_bytes": 1, "ledger_bytes": {}, "outside_bound": [], "max_concurrency": seats,
                   "per_sequence": {}, "pool": {}}
    return o


def test_the_shipped_retract_case_binds_the_reference_only():
    spec = find_case("tiny-sglang-retract").spec
    sglang = obs("sglang", seats=4.0, active=4)
    port = active_seqs_not_below_sglang(CheckInput(obs("my-port", seats=4.2), spec, sglang, "s"))
    assert port.outcome == "pass", port                    # the rule (not below SGLang) holds for the port
    assert "documents" not in port.message, port
    ref = active_seqs_not_below_sglang(CheckInput(obs("reference", seats=2.1), spec, sglang, "s"))
    assert ref.outcome == "pass" and "documented difference" in ref.message, ref
    stale = active_seqs_not_below_sglang(CheckInput(obs("reference", seats=4.2), spec, sglang, "s"))
    assert stale.failed and "documents reference admitting 2" in stale.message, stale
    short_port = active_seqs_not_below_sglang(CheckInput(obs("my-port", seats=2.1), spec, sglang, "s"))
    assert short_port.failed and "documents" not in short_port.message, short_port  # judged by the rule


def test_an_every_engine_entry_binds_every_engine_under_test():
    spec = find_case("impossible-k-past-drafter-block").spec
    vllm = obs("vllm", seats=4.0)
    refused = observation.failed(spec["id"], "my-port", "1", "plan", "h200", "refused", "k past the block")
    assert budget_parity_with_vllm(CheckInput(refused, spec, vllm, "s")).outcome == "pass"
    planned = budget_parity_with_vllm(CheckInput(obs("my-port", seats=4.0), spec, vllm, "s"))
    assert planned.failed and "every engine under test (my-port)" in planned.message, planned


def test_a_seat_difference_of_the_reference_does_not_bind_a_port():
    spec = find_case("tiny-dflash-c4-k8-b200").spec
    vllm = obs("vllm", seats=40.0)
    assert seats_equal_vllm(CheckInput(obs("my-port", seats=40.0), spec, vllm, "s")).outcome == "pass"
    assert seats_equal_vllm(CheckInput(obs("reference", seats=34.125), spec, vllm, "s")).outcome == "pass"
    assert seats_equal_vllm(CheckInput(obs("reference", seats=40.0), spec, vllm, "s")).failed


def test_an_entry_without_engines_is_refused_naming_the_file_and_path(tmp_path):
    doc = dict(find_case("tiny-sglang-retract").spec)
    doc["intended_differences"] = [{"oracle": "sglang", "field": "max_active_seqs", "expected": 2, "reason": "x"}]
    with pytest.raises(CaseError) as exc:
        parse_case(doc, find_case("tiny-sglang-retract").path)
    assert "intended_differences" in str(exc.value) and "engines" in str(exc.value)


def test_an_entry_in_the_old_form_says_what_it_became():
    doc = dict(find_case("tiny-sglang-retract").spec)
    doc["intended_differences"] = [{"engine": "sglang", "field": "max_active_seqs", "expected": 2, "reason": "x"}]
    with pytest.raises(CaseError) as exc:
        parse_case(doc, find_case("tiny-sglang-retract").path)
    assert "intended_differences[0].engine: renamed to `oracle`" in str(exc.value)
