"""Scheduler semantics: budgets, drafting reservation, active cap, align split, preemption, refusals."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conformance.paths import MODELS_DIR
from engine_under_test.acceptance import AcceptanceModel
from engine_under_test.budget import BudgetRefusal, resolve_budget
from engine_under_test.config import EngineConfig, SpeculativeConfig
from engine_under_test.engine_plan import build_plan, make_scheduler, simulate
from engine_under_test.memory.planner import state_slots_per_sequence
from engine_under_test.scheduler import Request
from engine_under_test.scheduler.kv_manager import KVCacheManager


def _cfg(method="dflash", k=8, **kw) -> EngineConfig:
    base = dict(model=MODELS_DIR / "tiny-hybrid", max_num_seqs=4, max_model_len=2048, max_num_batched_tokens=512,
                speculative_config=SpeculativeConfig(method, k, MODELS_DIR / "tiny-dflash"), kv_cache_memory_bytes=256 * 2**20)
    base.update(kw)
    return EngineConfig(**base)


def _reqs(n, prompt, out):
    return [Request(f"r{i}", list(range(2, 2 + prompt)), max_tokens=out) for i in range(n)]


def test_active_cap_is_budget_over_lookahead_for_dflash():
    b = resolve_budget(_cfg(max_num_seqs=32, max_num_batched_tokens=256))
    assert (b.lookahead_tokens, b.max_active_seqs) == (9, 256 // 9)
    assert resolve_budget(_cfg("draft_model", max_num_seqs=32, max_num_batched_tokens=256)).max_active_seqs == 32


def test_refuses_when_budget_cannot_hold_one_token_plus_lookahead():
    with pytest.raises(BudgetRefusal, match="cannot hold one token plus the drafting reservation"):
        resolve_budget(_cfg(max_num_seqs=1, max_num_batched_tokens=9))
    assert resolve_budget(_cfg(max_num_seqs=1, max_num_batched_tokens=10)).max_active_seqs == 1


def test_drafting_slots_are_charged_per_request():
    plan = build_plan(_cfg("pard", k=8, max_num_seqs=8, max_num_batched_tokens=256))
    steps = simulate(plan, _reqs(8, 128, 16), AcceptanceModel("fixed", fixed_accepted=2), token_seed=0)
    for s in steps:
        assert s.total_num_scheduled_tokens + 8 * s.num_scheduled_requests <= 256
    assert steps[0].total_num_scheduled_tokens == 256 - 2 * 8   # two requests admitted, each charged k slots


def test_align_mode_splits_prompts_at_the_last_block_boundary():
    plan = build_plan(_cfg(enable_prefix_caching=True, max_num_batched_tokens=2048))
    sched = make_scheduler(plan)
    for r in _reqs(1, 512, 4):
        sched.add_request(r)
    bs = plan.memory.layout.block_size_tokens
    first = sched.schedule()
    assert first.total_num_scheduled_tokens == (511 // bs) * bs and first.scheduled[0].is_prefill_chunk
    sched.update_from_output(first, {})
    second = sched.schedule()
    assert second.total_num_scheduled_tokens == 512 - (511 // bs) * bs


def _cdiv(a, b):
    return -(-a // b)


def test_align_state_tables_hold_1_plus_k_and_one_more_past_a_boundary():
    # vLLM's align-mode mamba table: 1 + k live state blocks per state group; a step whose tokens
    # reach a new block takes the next state block, and the previous state block is freed once
    # the computed tokens pass that boundary (drafts rejected past it keep both a while)
    k = 8
    plan = build_plan(_cfg(k=k, enable_prefix_caching=True, max_num_batched_tokens=200))
    bs = plan.memory.layout.block_size_tokens
    sched = make_scheduler(plan)
    sched.add_request(_reqs(1, 500, 120)[0])
    acc = AcceptanceModel("fixed", fixed_accepted=3)
    first_blocks = top_blocks = 0
    num_extra = 0
    while sched.has_unfinished_requests():
        out = sched.schedule()
        (sr,) = out.scheduled
        top_blocks = max(top_blocks, _cdiv(sr.num_computed_tokens + sr.num_scheduled_tokens, bs))
        first_blocks = first_blocks or top_blocks
        extra = top_blocks > first_blocks and sr.num_computed_tokens <= (top_blocks - 1) * bs
        num_extra += extra
        for ids in sr.state_block_ids.values():
            assert len(ids) == (2 + k if extra else 1 + k), (sched.step, sr.num_computed_tokens, top_blocks)
        sched.check_integrity()
        sched.update_from_output(out, {} if sr.is_prefill_chunk else {sr.req_id: [4] * (1 + acc.accepted(len(sr.spec_token_ids)))})
        sched.update_draft_token_ids({sr.req_id: [5] * k})
    assert num_extra >= 4 and top_blocks - first_blocks >= 4   # prefill chunks and decoding cross boundaries
    assert sched.kv.allocator.num_used_blocks == 0


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_admission_gate_counts_the_first_allocation_of_each_group(prefix_caching):
    # a waiting request needs its whole prompt's attention blocks plus 1 + k state blocks per
    # state group (align mode's position-indexed table caps a first allocation at 1 + k, as the
    # fixed slots of "none" mode), though its first chunk needs fewer attention blocks
    k, prompt = 8, 200
    plan = build_plan(_cfg(k=k, enable_prefix_caching=prefix_caching))
    lay = plan.memory.layout
    bs, num_attention, num_state = lay.block_size_tokens, len(lay.attention_group_ids), len(lay.state_group_ids)
    chunk = bs                                   # a block-aligned first chunk, prompt left over
    assert _cdiv(chunk + plan.budget.lookahead_tokens, bs) < _cdiv(prompt, bs)
    need = num_attention * _cdiv(prompt, bs) + num_state * (1 + k)
    for usable, admitted in ((need, True), (need - 1, False)):
        kv = KVCacheManager(replace(lay, num_blocks=usable + 1), plan.cfg.max_model_len,
                            state_slots_per_sequence(plan.cfg), align_mode=prefix_caching)
        req = _reqs(1, prompt, 4)[0]
        got = kv.allocate_slots(req, chunk, plan.budget.lookahead_tokens, admission=True)
        assert (got is not None) is admitted, (usable, need)
        kv.check_integrity()


def test_preemption_when_the_pool_is_full_and_integrity_holds():
    # 42 usable blocks; at k=1 a request holds 2 state slots x 2 groups, plus attention blocks that
    # grow to cdiv(700 + 2, 96) = 8: four admitted requests outgrow the pool while decoding
    plan = build_plan(_cfg(k=1, max_num_seqs=4, max_model_len=2048, num_gpu_blocks_override=43))
    steps = simulate(plan, _reqs(4, 300, 400), AcceptanceModel("fixed", fixed_accepted=1), token_seed=0,
                     check_integrity=True)
    assert sum(s.num_preempted for s in steps) > 0
    assert steps[-1].total_num_scheduled_tokens == 0 and steps[-1].num_running == 0


def test_output_carries_block_tables_and_state_slots():
    plan = build_plan(_cfg())
    sched = make_scheduler(plan)
    for r in _reqs(2, 100, 8):
        sched.add_request(r)
    out = sched.schedule()
    lay = plan.memory.layout
    for sr in out.scheduled:
        assert set(sr.block_ids) == set(lay.attention_group_ids) and set(sr.state_block_ids) == set(lay.state_group_ids)
        for ids in sr.state_block_ids.values():
            assert len(ids) == 1 + 8
        for ids in sr.block_ids.values():
            assert len(ids) * lay.block_size_tokens >= sr.num_scheduled_tokens + 9
        assert len(sr.token_ids) == sr.num_scheduled_tokens
    sched.update_from_output(out, {sr.req_id: [5] for sr in out.scheduled})
    sched.update_draft_token_ids({sr.req_id: [7] * 8 for sr in out.scheduled})
    nxt = sched.schedule()
    sr = nxt.scheduled[0]
    assert sr.spec_token_ids == (7,) * 8 and sr.spec_positions == tuple(range(101, 109))
    assert sr.token_ids == (5,) + (7,) * 8
    sched.update_from_output(nxt, {s.req_id: [9, 9, 9] for s in nxt.scheduled})   # 2 drafts accepted + bonus
    # 101 known tokens computed, plus the 2 accepted drafts; the bonus token is computed next step
    assert sched.requests[sr.req_id].num_computed_tokens == 101 + 2
    assert sched.requests[sr.req_id].num_tokens == 101 + 3


def test_prompt_longer_than_max_model_len_is_refused():
    sched = make_scheduler(build_plan(_cfg(max_model_len=128, max_num_batched_tokens=512)))
    with pytest.raises(ValueError, match="does not fit max_model_len 128"):
        sched.add_request(Request("long", list(range(200)), max_tokens=1))


def test_model_acceptance_is_refused_in_plan_mode():
    with pytest.raises(ValueError, match="plan mode has no model"):
        AcceptanceModel.from_spec({"mode": "model"}, 8, 0)


def test_refuses_k_past_the_dflash_block_and_len_past_positions():
    with pytest.raises(BudgetRefusal, match="at most 8 draft tokens per step"):
        build_plan(_cfg(k=9))
    with pytest.raises(BudgetRefusal, match="max_position_embeddings"):
        build_plan(_cfg(max_model_len=65536))
