"""Property-based: random workloads through allocator and scheduler keep every invariant."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st

from conformance.paths import MODELS_DIR
from engine_under_test.acceptance import AcceptanceModel
from engine_under_test.block_allocator import BlockAllocator, OutOfBlocks
from engine_under_test.config import EngineConfig, SpeculativeConfig
from engine_under_test.engine_plan import build_plan, make_scheduler
from engine_under_test.budget import BudgetRefusal
from engine_under_test.memory.planner import MemoryRefusal
from engine_under_test.scheduler import Request


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 64), st.lists(st.tuples(st.booleans(), st.integers(0, 8)), max_size=60))
def test_allocator_integrity(num_blocks, ops):
    alloc = BlockAllocator(num_blocks)
    held: list[list[int]] = []
    for is_alloc, n in ops:
        if is_alloc:
            if alloc.can_allocate(n):
                held.append(alloc.allocate(n))
            else:
                try:
                    alloc.allocate(n)
                except OutOfBlocks:
                    pass
                else:
                    raise AssertionError("allocate past can_allocate must raise")
        elif held:
            alloc.free(held.pop(n % len(held)))
        alloc.check_integrity()
        assert alloc.num_free_blocks + sum(map(len, held)) == num_blocks - 1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(method=st.sampled_from(["dflash", "draft_model", "pard", "eagle3"]), k=st.integers(1, 8),
       max_num_seqs=st.integers(1, 8), mnbt=st.integers(64, 1024), num_blocks=st.integers(24, 200),
       prefix=st.booleans(), accepted=st.integers(0, 8),
       reqs=st.lists(st.tuples(st.integers(1, 400), st.integers(1, 40)), min_size=1, max_size=10))
def test_scheduler_invariants(method, k, max_num_seqs, mnbt, num_blocks, prefix, accepted, reqs):
    mnbt = max(mnbt, max_num_seqs, 2 * k + 2)
    cfg = EngineConfig(model=MODELS_DIR / "tiny-hybrid", max_num_seqs=max_num_seqs, max_model_len=512,
                       max_num_batched_tokens=mnbt, speculative_config=SpeculativeConfig(method, k, MODELS_DIR / "tiny-dflash"),
                       kv_cache_memory_bytes=1 << 30, num_gpu_blocks_override=num_blocks, enable_prefix_caching=prefix)
    try:
        plan = build_plan(cfg)
    except (MemoryRefusal, BudgetRefusal):   # a refusal is an answer; only what it plans must hold
        return
    led = plan.memory.ledger
    assert led.outside_bound == () and led.pool_bytes <= led.bound_bytes
    b = plan.budget
    sched = make_scheduler(plan)
    for i, (p, o) in enumerate(reqs):
        sched.add_request(Request(f"r{i}", [3] * p, max_tokens=o))
    acc = AcceptanceModel("fixed", fixed_accepted=accepted)
    for _ in range(5000):
        if not sched.has_requests():
            break
        out = sched.schedule()
        assert out.total_num_scheduled_tokens <= b.max_num_scheduled_tokens
        assert out.total_num_scheduled_tokens + b.drafting_slots_per_request * len(out.scheduled) <= b.max_num_batched_tokens
        assert len(sched.running) <= b.max_num_seqs
        assert len(out.scheduled) <= b.max_active_seqs or out.preempted_req_ids
        sched.check_integrity()
        sampled = {s.req_id: [4] * (1 + acc.accepted(len(s.spec_token_ids))) for s in out.scheduled if not s.is_prefill_chunk}
        sched.update_from_output(out, sampled)
        sched.update_draft_token_ids({s.req_id: [5] * k for s in out.scheduled if s.req_id in sched.requests})
        sched.check_integrity()
    else:
        raise AssertionError("scheduler made no progress")
    assert all(r.num_output_tokens == r.max_tokens for r in sched.requests.values())
    assert sched.kv.allocator.num_used_blocks == 0
