"""Blocks are freed on the processed-token basis (vLLM 0.33 `KVCacheManager.allocate_slots` passes
`num_computed_tokens - num_in_flight_tokens` to `remove_skipped_blocks`).

Under async scheduling a step is scheduled before the previous step's output arrives, so a
request's num_computed_tokens already counts tokens still in flight. An align-mode state block
behind those tokens (the GDN prefill checkpoint block of a prompt's last chunk, written by the
step still executing) must stay allocated until that step is processed; the sync engine, with
nothing in flight at schedule time, frees it one step earlier.
"""

from __future__ import annotations

from conformance.paths import MODELS_DIR
from engine_under_test.config import EngineConfig, SpeculativeConfig
from engine_under_test.engine_plan import build_plan, make_scheduler
from engine_under_test.scheduler import Request

K = 8


def _scheduler(async_scheduling: bool):
    cfg = EngineConfig(model=MODELS_DIR / "tiny-hybrid", max_num_seqs=4, max_model_len=2048, max_num_batched_tokens=512,
                       speculative_config=SpeculativeConfig("dflash", K, MODELS_DIR / "tiny-dflash"),
                       kv_cache_memory_bytes=64 * 2**20, enable_prefix_caching=True, gdn_prefill_checkpoints=True,
                       async_scheduling=async_scheduling)
    plan = build_plan(cfg)
    sched = make_scheduler(plan)
    bs = plan.memory.layout.block_size_tokens
    prompt = 2 * bs + bs // 2      # one chunk spanning the prompt's last cacheable boundary: a checkpoint block
    sched.add_request(Request("r", list(range(2, 2 + prompt)), max_tokens=16))
    return sched, plan.memory.layout


def _state_blocks(out) -> dict[int, set[int]]:
    (sr,) = out.scheduled
    return {g: set(ids) for g, ids in sr.state_block_ids.items()}


def test_in_flight_tokens_follow_schedule_and_output():
    sched, _ = _scheduler(async_scheduling=True)
    first = sched.schedule()
    req = sched.requests["r"]
    assert req.num_in_flight_tokens == first.total_num_scheduled_tokens == req.num_prompt_tokens
    second = sched.schedule()
    assert req.num_in_flight_tokens == first.total_num_scheduled_tokens + second.total_num_scheduled_tokens
    sched.update_from_output(first, {"r": [7]})
    assert req.num_in_flight_tokens == second.total_num_scheduled_tokens
    sched.check_integrity()


def test_async_step_keeps_the_blocks_the_step_in_flight_writes():
    sched, lay = _scheduler(async_scheduling=True)
    first = sched.schedule()                       # the whole prompt in one chunk, with its checkpoint block
    held = _state_blocks(first)
    free_after_prefill = sched.kv.allocator.num_free_blocks
    second = sched.schedule()                      # scheduled while the prefill is still in flight
    assert _state_blocks(second) == held           # nothing behind the in-flight tokens is freed
    assert sched.kv.allocator.num_free_blocks == free_after_prefill
    sched.update_from_output(first, {"r": [7]})    # the prefill is processed: its blocks may go now
    third = sched.schedule()
    freed = {g: held[g] - ids for g, ids in _state_blocks(third).items()}
    assert all(len(b) == 1 for b in freed.values()), freed   # the checkpoint block, one per state group
    assert sched.kv.allocator.num_free_blocks == free_after_prefill + len(lay.state_group_ids)
    sched.check_integrity()


def test_sync_step_frees_them_at_once():
    sched, lay = _scheduler(async_scheduling=False)
    first = sched.schedule()
    held = _state_blocks(first)
    free_after_prefill = sched.kv.allocator.num_free_blocks
    sched.update_from_output(first, {"r": [7]})
    sched.update_draft_token_ids({"r": [5] * K})
    second = sched.schedule()
    freed = {g: held[g] - ids for g, ids in _state_blocks(second).items()}
    assert all(len(b) == 1 for b in freed.values()), freed
    assert sched.kv.allocator.num_free_blocks == free_after_prefill + len(lay.state_group_ids)
