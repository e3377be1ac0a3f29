"""Memory suite: see README.md for the pass criteria."""

from __future__ import annotations

import pytest

from conformance.goldens import check_golden, find_golden, golden_view

POOL_CATEGORIES = ("attention_kv", "recurrent_state", "draft_kv")


def _ok(obs) -> None:
    if obs["status"] != "ok":
        pytest.skip(f"{obs['engine']['name']} {obs['status']} {obs['case_id']}: {obs['message']}")


def test_memory_golden(engine, case, observation, golden):
    check_golden(golden, golden_view(observation, ["memory"]))


@pytest.mark.engines("reference")
def test_everything_inside_the_bound(engine, case, observation):
    _ok(observation)
    mem = observation["memory"]
    assert mem["outside_bound"] == [], f"allocations outside the operator's bound: {mem['outside_bound']}"
    ledger = mem["ledger_bytes"]
    in_pool = sum(ledger[c] or 0 for c in POOL_CATEGORIES)
    total = sum(v or 0 for v in ledger.values())
    limit = total if "gpu_memory_utilization" in case.spec["memory"] else in_pool
    assert limit <= mem["bound_bytes"], (
        f"ledger {limit} B exceeds the bound {mem['bound_bytes']} B by {limit - mem['bound_bytes']} B: {ledger}")


@pytest.mark.engines("reference")
def test_seats_not_below_vllm(engine, case, observation):
    oracle = find_golden("memory", "vllm", case.id)
    if oracle["status"] != "ok":
        pytest.skip(f"vLLM {oracle['status']}: {oracle['message']}")
    _ok(observation)
    ref, vll = observation["memory"]["max_concurrency"], oracle["memory"]["max_concurrency"]
    assert ref >= vll, f"reference seats {ref} full-length sequences where vLLM seats {vll} in {case.spec['memory']}"


@pytest.mark.engines("reference")
@pytest.mark.cases("seed-unified-pool-c32-k8")
def test_unified_pool_seats_32(engine, case, observation):
    oracle = find_golden("memory", "vllm", case.id)
    assert oracle["status"] == "ok" and oracle["memory"]["max_concurrency"] >= 32, (
        f"the case is meant to give vLLM room for 32 full-length sequences; vLLM plans {oracle['memory']}")
    assert observation["status"] == "ok", observation["message"]
    assert observation["memory"]["pool"]["unified"] is True
    assert observation["budget"]["max_active_seqs"] >= 32
    assert observation["memory"]["max_concurrency"] >= 32


@pytest.mark.cases("seed-draft-kv-c8")
def test_draft_kv_scales_with_seqs(engine, case, observation, observations_of):
    from conformance.cases import find_case

    _ok(observation)
    c32 = observations_of(engine, find_case("seed-draft-kv-c32"))
    _ok(c32)
    for obs in (observation, c32):
        assert "draft_kv" not in obs["memory"]["outside_bound"], f"{obs['case_id']}: draft KV outside the bound"
    per8 = observation["memory"]["per_sequence"]["draft_kv_bytes"]
    per32 = c32["memory"]["per_sequence"]["draft_kv_bytes"]
    assert per8 and per8 == per32, f"a full-length sequence's draft KV differs: {per8} vs {per32}"
    seqs8 = observation["budget"]["max_num_seqs"]
    seqs32 = c32["budget"]["max_num_seqs"]
    assert (seqs8, seqs32) == (8, 32)
    assert per32 * seqs32 == 4 * per8 * seqs8
