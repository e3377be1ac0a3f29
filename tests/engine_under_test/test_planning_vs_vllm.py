"""The engine's planning against the installed vLLM 0.33.0 (its real code, in its own venv).

- drafting table: for every drafting-table-* case vLLM plans, the engine's table row
  (engine_under_test.drafting) and resolved budget equal vLLM's;
- tiny cases: the engine's per-step trace equals vLLM's on the four counted fields, and its
  seats are never below vLLM's for the same bytes.
"""

from __future__ import annotations

import pytest

from conformance.cases import load_all, select
from engine_under_test.drafting import drafting_budget

pytestmark = pytest.mark.oracle

STEP_FIELDS = ("total_num_scheduled_tokens", "num_scheduled_requests", "num_spec_tokens", "num_preempted")


@pytest.fixture(scope="module")
def both():
    from conformance.adapters import reference_plan
    from conformance.adapters.runner import plan_cases

    cases = select(load_all(), ["drafting-table-*", "tiny-dflash-*"])
    assert cases, "no drafting-table-* or tiny-dflash-* cases found"
    vllm = plan_cases("vllm", cases)
    return [(c, v, reference_plan.plan(c.to_json())) for c, v in zip(cases, vllm)]


def test_drafting_table_equals_vllm(both):
    compared = []
    for case, v, r in both:
        if not case.id.startswith("drafting-table-") or v["status"] != "ok":
            continue
        sp = case.spec["speculative"]
        row = drafting_budget(sp["method"], sp["num_speculative_tokens"])
        assert (row.drafting_slots_per_request, row.lookahead_tokens) == (
            v["budget"]["drafting_slots_per_request"], v["budget"]["lookahead_tokens"]), case.id
        assert r["status"] == "ok" and r["budget"] == {k: v["budget"][k] for k in r["budget"]}, case.id
        compared.append(case.id)
    assert compared, "vLLM planned no drafting-table case"


def test_tiny_traces_and_seats_equal_vllm(both):
    compared = []
    for case, v, r in both:
        if not case.id.startswith("tiny-") or v["status"] != "ok":
            continue
        assert r["status"] == "ok", r["message"]
        ref = [{f: s[f] for f in STEP_FIELDS} for s in r["trace"]["steps"]]
        vll = [{f: s[f] for f in STEP_FIELDS} for s in v["trace"]["steps"]]
        assert ref == vll, f"{case.id}: trace differs from vLLM"
        assert r["memory"]["max_concurrency"] >= v["memory"]["max_concurrency"], case.id
        compared.append(case.id)
    assert compared, "vLLM planned no tiny case"
