"""conformance.harness.plan_log: a dry run's lines as an observation, on hand-written port output."""

from __future__ import annotations

from conformance.harness.engine_file import parse_engine_file
from conformance.harness.plan_log import build_observation
from conformance.verdicts import explains_short_seats

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
    v = explains_short_seats(obs)
    assert v.outcome == "pass", v


def test_a_message_rule_that_matches_nothing_is_named_as_not_printed():
    plan = log_plan(message=r"^note: (.*)$")
    obs = build_observation(plan, "nothing here\n", CASE, "p", "1")
    assert obs["message"] is None
    assert "message" in obs["provenance"]["glue"][0]["description"]
