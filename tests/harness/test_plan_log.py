"""conformance.harness.plan_log: a dry run's lines as an observation, on hand-written port output."""

from __future__ import annotations

from conformance.checks.memory import explains_short_seats
from conformance.checks.row import CheckInput
from conformance.engines.engine_file import parse_engine_file
from conformance.harness.plan_log import build_observation

CASE = {"id": "c", "device": "h200"}


def log_plan(**log):
    doc = {"name": "p", "role": "under-test", "version": "1",
           "plan": {"log": dict({"argv": ["true"]}, **log)}}
    return parse_engine_file(doc, __import__("pathlib").Path("/tmp/p.yaml")).plan


def test_plan_log_message_reaches_the_observation_and_explains_short_seats():
    plan = log_plan(fields={"memory.max_concurrency": {"regex": r"seats ([\d.]+) sequences", "type": "float"},
                            "budget.max_num_seqs": r"max_num_seqs=(\d+)"},
                    message=r"^note: (the pool seats \d+ full-length sequences.*)$")
    text = ("max_num_seqs=32\npool: seats 18.4 sequences\n"
            "note: the pool seats 18 full-length sequences of 8192 tokens in 40 GiB\n")
    obs = build_observation(plan, text, CASE, "p", "1")
    assert obs["message"] == "the pool seats 18 full-length sequences of 8192 tokens in 40 GiB"
    v = explains_short_seats(CheckInput(obs, {}))
    assert v.outcome == "pass", v


def test_a_message_rule_that_matches_nothing_is_named_as_not_printed():
    plan = log_plan(message=r"^note: (.*)$")
    obs = build_observation(plan, "nothing here\n", CASE, "p", "1")
    assert obs["message"] is None
    assert "message" in obs["provenance"]["glue"][0]["description"]


def test_unit_aware_captures_read_human_units_and_thousands_separators_into_bytes_and_tokens():
    plan = log_plan(fields={"memory.bound_bytes": {"regex": r"bound: ([\d.,]+ \w+)", "unit": "bytes"},
                            "memory.per_sequence.draft_kv_bytes": {"regex": r"draft per request: ([\d.,]+ ?\w*)",
                                                                   "unit": "bytes"},
                            "memory.ledger_bytes.draft_kv": {"regex": r"draft in all: ([\d.,]+ \w+)", "unit": "bytes"},
                            "budget.max_num_scheduled_tokens": {"regex": r"step budget ([\d,]+ tokens)",
                                                                "unit": "tokens"}})
    text = "bound: 80 GiB\ndraft per request: 160.312 MiB\ndraft in all: 1,344,798,720 B\nstep budget 8,192 tokens\n"
    obs = build_observation(plan, text, CASE, "p", "1")
    assert obs["memory"]["bound_bytes"] == 80 * 2**30
    assert obs["memory"]["per_sequence"]["draft_kv_bytes"] == round(160.312 * 2**20)
    assert obs["memory"]["ledger_bytes"]["draft_kv"] == 1344798720
    assert obs["budget"]["max_num_scheduled_tokens"] == 8192


def test_a_capture_in_an_unknown_unit_names_the_field_and_the_line():
    import pytest

    plan = log_plan(fields={"memory.bound_bytes": {"regex": r"bound: (.*)$", "unit": "bytes"}})
    with pytest.raises(ValueError) as exc:
        build_observation(plan, "bound: 80 parsecs\n", CASE, "p", "1")
    assert "plan.log.fields.memory.bound_bytes" in str(exc.value) and "80 parsecs" in str(exc.value)
