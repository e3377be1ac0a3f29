"""The KV manager's contract on its own (engine_under_test.scheduler.kv_manager).

- construction: `num_reserved_blocks` reaches the allocator; state groups get fixed `StateSlots`
  unless align mode is asked for (the default is not align mode);
- `allocate_slots` returns the request's tables (as `blocks_of`), counts only the blocks the
  request does not hold yet, and succeeds when the need equals the free blocks exactly;
- `holds_blocks` and `check_integrity` (a block owned twice, tables and allocator disagreeing).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from conformance.paths import MODELS_DIR
from engine_under_test.config import EngineConfig, SpeculativeConfig
from engine_under_test.engine_plan import build_plan
from engine_under_test.scheduler import Request
from engine_under_test.scheduler.kv_manager import KVCacheManager
from engine_under_test.scheduler.kv_tables import AttentionTable, StateSlots

K = 4


def _layout(num_blocks=None):
    cfg = EngineConfig(model=MODELS_DIR / "tiny-hybrid", max_num_seqs=4, max_model_len=1024, max_num_batched_tokens=512,
                       speculative_config=SpeculativeConfig("dflash", K, MODELS_DIR / "tiny-dflash"),
                       kv_cache_memory_bytes=64 * 2**20)
    lay = build_plan(cfg).memory.layout
    return replace(lay, num_blocks=num_blocks) if num_blocks else lay


def _need(lay, tokens):
    """Blocks a fresh request needs for `tokens` slots: attention blocks per attention group + 1 + k per state group."""
    return len(lay.attention_group_ids) * -(-tokens // lay.block_size_tokens) + len(lay.state_group_ids) * (1 + K)


def test_construction():
    lay = _layout()
    kv = KVCacheManager(lay, 1024, 1 + K, num_reserved_blocks=2)
    assert kv.allocator.num_reserved_blocks == 2 and kv.allocator.num_free_blocks == lay.num_blocks - 2
    assert (kv.layout, kv.max_model_len, kv.num_state_slots, kv.align_mode) == (lay, 1024, 1 + K, False)
    for gid in lay.state_group_ids:
        assert type(kv.tables[gid]) is StateSlots and kv.tables[gid].num_slots == 1 + K
    for gid in lay.attention_group_ids:
        assert type(kv.tables[gid]) is AttentionTable


def test_allocate_returns_the_tables_and_fits_exactly():
    lay = _layout()
    tokens = 3 * lay.block_size_tokens
    exact = _need(lay, tokens)
    kv = KVCacheManager(replace(lay, num_blocks=exact + 1), 1024, 1 + K)
    req = Request("r", [3] * tokens, max_tokens=4)
    got = kv.allocate_slots(req, tokens, 0)
    assert got is not None and got == kv.blocks_of("r") and kv.allocator.num_free_blocks == 0
    assert all(got[g] for g in lay.attention_group_ids + lay.state_group_ids)
    assert kv.holds_blocks("r") and not kv.holds_blocks("other")
    kv.check_integrity()


def test_a_running_request_is_charged_only_what_it_does_not_hold():
    lay = _layout()
    bs = lay.block_size_tokens
    first = _need(lay, bs)
    kv = KVCacheManager(replace(lay, num_blocks=first + len(lay.attention_group_ids) + 1), 1024, 1 + K)
    req = Request("r", [3] * (2 * bs), max_tokens=4)
    assert kv.allocate_slots(req, bs, 0) is not None
    req.num_computed_tokens = bs
    assert kv.allocator.num_free_blocks == len(lay.attention_group_ids)
    assert kv.allocate_slots(req, bs, 0) is not None          # one more attention block per group: all that is free
    assert kv.allocator.num_free_blocks == 0
    kv.check_integrity()


@pytest.mark.parametrize("corrupt, message", [
    (lambda kv, gid: kv.tables[gid]._tables["r"].append(kv.tables[gid]._tables["r"][0]), "a block is owned twice"),
    (lambda kv, gid: kv.tables[gid]._tables["r"].pop(), "allocator and block tables disagree"),
])
def test_check_integrity_catches_corruption(corrupt, message):
    lay = _layout()
    kv = KVCacheManager(lay, 1024, 1 + K)
    kv.allocate_slots(Request("r", [3] * 40, max_tokens=4), 40, 0)
    kv.check_integrity()
    corrupt(kv, lay.attention_group_ids[0])
    with pytest.raises(AssertionError) as exc:
        kv.check_integrity()
    assert str(exc.value).splitlines()[0] == message


def test_only_admission_counts_the_whole_prompt():
    lay = _layout()
    bs = lay.block_size_tokens
    pool = replace(lay, num_blocks=_need(lay, bs) + 1)           # room for a one-block chunk, not the prompt
    req = Request("r", [3] * (3 * bs), max_tokens=4)
    assert KVCacheManager(pool, 1024, 1 + K).allocate_slots(req, bs, 0, admission=True) is None
    kv = KVCacheManager(pool, 1024, 1 + K)
    assert kv.allocate_slots(req, bs, 0) is not None and kv.allocator.num_free_blocks == 0
