"""Trace suite: see README.md for the pass criteria."""

from __future__ import annotations

import pytest

from conformance.goldens import check_golden, find_golden, golden_view

STEP_FIELDS = ("total_num_scheduled_tokens", "num_scheduled_requests", "num_spec_tokens", "num_preempted")


def test_trace_golden(engine, case, observation, golden):
    check_golden(golden, golden_view(observation, ["trace"]))


@pytest.mark.engines("reference", "vllm")
def test_steps_within_budget(engine, case, observation):
    if observation["status"] != "ok" or not observation.get("trace"):
        pytest.skip(f"{engine} {observation['status']}: no trace ({observation['message']})")
    budget = observation["budget"]
    steps = observation["trace"]["steps"]
    assert steps, "an ok trace has at least one step"
    over = [(i, s["total_num_scheduled_tokens"]) for i, s in enumerate(steps)
            if s["total_num_scheduled_tokens"] > budget["max_num_scheduled_tokens"]]
    assert not over, f"steps over max_num_scheduled_tokens {budget['max_num_scheduled_tokens']}: {over[:10]}"
    crowded = [(i, s["num_scheduled_requests"]) for i, s in enumerate(steps)
               if s["num_scheduled_requests"] > budget["max_active_seqs"]]
    assert not crowded, f"steps over max_active_seqs {budget['max_active_seqs']}: {crowded[:10]}"


@pytest.mark.engines("reference")
@pytest.mark.cases("tiny-*")
def test_trace_equals_vllm(engine, case, observation):
    oracle = find_golden("trace", "vllm", case.id)
    if oracle["status"] != "ok":
        pytest.skip(f"vLLM {oracle['status']}: {oracle['message']}")
    assert observation["status"] == "ok", observation["message"]
    intended = [d for d in case.spec.get("intended_differences", []) if d["field"] == "trace"]
    ref = [{f: s[f] for f in STEP_FIELDS} for s in observation["trace"]["steps"]]
    vll = [{f: s[f] for f in STEP_FIELDS} for s in oracle["trace"]["steps"]]
    if intended:
        pytest.fail(f"{case.id} declares an intended trace difference ({intended[0]['reason']}) "
                    "but the suite has no check for it yet")
    first = next((i for i, (a, b) in enumerate(zip(ref, vll)) if a != b), None)
    assert first is None and len(ref) == len(vll), (
        f"reference trace differs from vLLM 0.33.0 on {case.id}: "
        + (f"first at step {first}: reference {ref[first]}, vLLM {vll[first]}" if first is not None
           else f"{len(ref)} steps vs {len(vll)}"))
