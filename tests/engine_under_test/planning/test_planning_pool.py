"""The unified pool's one allocation and its typed, zero-copy, non-overlapping views."""

from __future__ import annotations

import torch

from conformance.paths import MODELS_DIR
from engine_under_test.config import EngineConfig, SpeculativeConfig
from engine_under_test.engine_plan import build_plan


def _plan(prefix_caching=False):
    cfg = EngineConfig(model=MODELS_DIR / "tiny-hybrid", max_num_seqs=2, max_model_len=256, max_num_batched_tokens=256,
                       speculative_config=SpeculativeConfig("dflash", 4, MODELS_DIR / "tiny-dflash"),
                       kv_cache_memory_bytes=8 * 2**20, num_gpu_blocks_override=20, enable_prefix_caching=prefix_caching)
    return build_plan(cfg)


def test_plan_mode_never_allocates():
    plan = _plan()
    assert not plan.pool.is_allocated


def test_views_are_typed_zero_copy_and_disjoint():
    plan = _plan()
    pool = plan.pool
    raw = pool.allocate("cpu")
    lay = plan.memory.layout
    assert raw.dtype == torch.uint8 and raw.numel() == lay.total_bytes
    assert tuple(raw.shape) == (lay.num_page_slots, lay.num_blocks, lay.page_size_bytes)
    k, v = pool.attention_kv("target.layers.3")
    assert k.shape == (lay.num_blocks, lay.block_size_tokens, 2, 64) and k.dtype == torch.bfloat16
    conv, ssm = pool.recurrent_state("target.layers.0")
    assert conv.shape == (lay.num_blocks, 4 * 32 * 2 + 8 * 32, 3 + 4) and conv.dtype == torch.bfloat16
    assert ssm.shape == (lay.num_blocks, 8, 32, 32) and ssm.dtype == torch.float32
    # writes through a view land in the one byte tensor, and only in that layer's slot and block
    before = raw.clone()
    k[5].fill_(1.0)
    changed = (raw != before).nonzero()
    assert set(changed[:, 0].tolist()) == {lay.slot_of("target.layers.3")} and set(changed[:, 1].tolist()) == {5}
    # K and V of one layer, and layers of one group, never overlap; across groups a block id
    # aliases the same bytes, which is safe because a block id belongs to one group at a time
    ssm[7].fill_(2.0)
    v[8].fill_(3.0)
    k2, v2 = pool.attention_kv("draft.layers.0")
    k2[8].fill_(4.0)
    assert torch.all(ssm[7] == 2.0) and torch.all(v[8] == 3.0) and torch.all(k[8] == 0) and torch.all(k2[8] == 4.0)
    # every layer's views stay within its own page slot
    names = list(lay.layer_slots)
    for a in names:
        views = pool.attention_kv(a) if lay.group_of(a).is_attention else pool.recurrent_state(a)
        for t in views:
            start = t.data_ptr() - raw.data_ptr()
            assert start // (lay.num_blocks * lay.page_size_bytes) == lay.slot_of(a)


def test_second_allocate_raises():
    plan = _plan()
    plan.pool.allocate("cpu")
    try:
        plan.pool.allocate("cpu")
    except RuntimeError as exc:
        assert "already allocated" in str(exc)
    else:
        raise AssertionError("a second allocate must raise")
