"""The step budget with drafting slots, and preemption's bookkeeping (engine_under_test.scheduler).

- pard charges k drafting slots per scheduled request: every step's scheduled tokens plus
  k x scheduled requests stay within max_num_batched_tokens, and a prefill step of running
  requests fills it exactly (the input budget binds, running requests first);
- a preempted request goes back to the waiting queue with nothing computed, no drafts
  and its preemption counted once per preemption; steps are numbered 1, 2, 3, ...
"""

from __future__ import annotations

from conformance.paths import MODELS_DIR
from engine_under_test.acceptance import AcceptanceModel
from engine_under_test.config import EngineConfig, SpeculativeConfig
from engine_under_test.engine_plan import build_plan, make_scheduler, simulate
from engine_under_test.scheduler import Request
from engine_under_test.scheduler.request import RequestStatus


def _plan(method="pard", k=8, **kw):
    base = dict(model=MODELS_DIR / "tiny-hybrid", max_num_seqs=4, max_model_len=2048, max_num_batched_tokens=64,
                speculative_config=SpeculativeConfig(method, k, MODELS_DIR / "tiny-dflash"), kv_cache_memory_bytes=256 * 2**20)
    base.update(kw)
    return build_plan(EngineConfig(**base))


def test_running_prefills_fill_the_input_budget_exactly_with_drafting_slots():
    plan = _plan()
    s = make_scheduler(plan)
    for i in range(3):
        s.add_request(Request(f"r{i}", [3] * 300, max_tokens=2))
    totals = []
    for step in range(1, 40):
        if not s.has_requests():
            break
        out = s.schedule()
        assert out.step == step
        n = sum(r.num_scheduled_tokens for r in out.scheduled)
        assert n + 8 * len(out.scheduled) <= 64, (step, n, len(out.scheduled))
        totals.append((n, len(out.scheduled)))
        s.update_from_output(out, {r.req_id: [4] for r in out.scheduled if not r.is_prefill_chunk})
        s.check_integrity()
    assert (56, 1) in totals                      # one running prefill chunk: 64 - 8 slots
    assert all(n + 8 * m == 64 for n, m in totals[:5]), totals[:5]


def test_preemption_resets_the_request_and_counts_once():
    plan = _plan("dflash", k=1, max_num_seqs=4, num_gpu_blocks_override=43, max_num_batched_tokens=512)
    s = make_scheduler(plan)
    for i in range(4):
        s.add_request(Request(f"r{i}", [3] * 300, max_tokens=400))
    seen = {}
    for _ in range(3000):
        if not s.has_requests():
            break
        out = s.schedule()
        for rid in out.preempted_req_ids:
            r = s.requests[rid]
            seen[rid] = seen.get(rid, 0) + 1
            assert r.status is RequestStatus.PREEMPTED and r.num_computed_tokens == 0 and r.spec_token_ids == []
            assert r.num_preemptions == seen[rid] and r in s.waiting
        s.update_from_output(out, {r.req_id: [4] * (1 + min(1, len(r.spec_token_ids))) for r in out.scheduled
                                   if not r.is_prefill_chunk})
        s.update_draft_token_ids({r.req_id: [5] for r in out.scheduled if r.req_id in s.requests})
    assert seen and all(r.num_preemptions == seen.get(r.request_id, 0) for r in s.requests.values())
