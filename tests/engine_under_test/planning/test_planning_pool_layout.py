"""The pool layout's bookkeeping and the pool's refusals (engine_under_test.pool).

- `build_layout` refuses groups of two page sizes, or attention groups of two block sizes, and
  reports block_size_tokens 0 for a pool without attention groups;
- `PoolLayout`: bytes_per_block = num_page_slots x page_size_bytes, total = num_blocks x that;
  `group_of` / `slot_of` name the layer's (group, slot), an unknown layer is a `KeyError` naming
  the known ones; attention_group_ids / state_group_ids split the groups by kind; `to_json`
  carries every figure and one entry per group;
- `UnifiedPool`: `tensor` before `allocate` raises; attention_kv of a state layer and
  recurrent_state of an attention layer raise `KeyError`; K and V are the two halves of a page.
"""

from __future__ import annotations

import pytest

from conformance.paths import MODELS_DIR
from engine_under_test.config import EngineConfig, SpeculativeConfig
from engine_under_test.engine_plan import build_plan
from engine_under_test.memory.groups import CacheGroup
from engine_under_test.memory.specs import AttentionLayerSpec
from engine_under_test.pool import UnifiedPool, build_layout


def _plan():
    cfg = EngineConfig(model=MODELS_DIR / "tiny-hybrid", max_num_seqs=2, max_model_len=256, max_num_batched_tokens=256,
                       speculative_config=SpeculativeConfig("dflash", 4, MODELS_DIR / "tiny-dflash"),
                       kv_cache_memory_bytes=8 * 2**20, num_gpu_blocks_override=20)
    return build_plan(cfg)


def _attn(block_size_tokens, heads=2):
    return AttentionLayerSpec(block_size_tokens=block_size_tokens, num_kv_heads=heads, head_dim=64, dtype="bfloat16")


def test_layout_figures_and_json():
    lay = _plan().memory.layout
    assert lay.bytes_per_block == lay.num_page_slots * lay.page_size_bytes
    assert lay.total_bytes == lay.num_blocks * lay.bytes_per_block == 20 * lay.bytes_per_block
    doc = lay.to_json()
    assert {k: doc[k] for k in ("num_blocks", "page_size_bytes", "num_page_slots", "block_size_tokens",
                                "bytes_per_block", "total_bytes")} == {
        "num_blocks": 20, "page_size_bytes": lay.page_size_bytes, "num_page_slots": lay.num_page_slots,
        "block_size_tokens": lay.block_size_tokens, "bytes_per_block": lay.bytes_per_block,
        "total_bytes": lay.total_bytes}
    assert doc["groups"] == [{"group_id": g.group_id, "kind": "attention" if g.is_attention else "state",
                              "num_layers": len(g.layer_names)} for g in lay.groups]
    assert {g["kind"] for g in doc["groups"]} == {"attention", "state"}


def test_group_ids_by_kind_and_layer_lookup():
    lay = _plan().memory.layout
    att, st = lay.attention_group_ids, lay.state_group_ids
    assert att and st and set(att).isdisjoint(st) and sorted(att + st) == [g.group_id for g in lay.groups]
    assert all(lay.groups[i].is_attention for i in att) and all(lay.groups[i].is_state for i in st)
    for name, (gid, slot) in lay.layer_slots.items():
        assert lay.group_of(name).group_id == gid and lay.slot_of(name) == slot
        assert name in lay.group_of(name).layer_names
    with pytest.raises(KeyError, match=r"no layer 'target.layers.999' in the pool \(layers: target.layers.0, "):
        lay.group_of("target.layers.999")
    with pytest.raises(KeyError, match="no layer 'x'"):
        lay.slot_of("x")


def test_build_layout_refuses_mixed_page_or_block_sizes():
    a16, a32 = _attn(16), _attn(32)
    with pytest.raises(ValueError, match="unified pool needs one page size"):
        build_layout(4, (CacheGroup(0, a16, ("a",)), CacheGroup(1, a32, ("b",))), 1)
    same_page = _attn(32, heads=1)          # 32 tokens x 1 head = 16 tokens x 2 heads: one page size
    assert same_page.page_size_bytes == a16.page_size_bytes
    with pytest.raises(ValueError, match=r"attention groups disagree on block size: \[16, 32\]"):
        build_layout(4, (CacheGroup(0, a16, ("a",)), CacheGroup(1, same_page, ("b",))), 1)
    lay = build_layout(4, (CacheGroup(0, a16, ("a", "b")),), 2)
    assert (lay.block_size_tokens, lay.num_page_slots, lay.layer_slots) == (16, 2, {"a": (0, 0), "b": (0, 1)})


def test_pool_without_attention_has_block_size_zero():
    state = next(g for g in _plan().memory.layout.groups if g.is_state)
    lay = build_layout(3, (state,), len(state.layer_names))
    assert lay.block_size_tokens == 0 and lay.attention_group_ids == () and lay.state_group_ids == (state.group_id,)


def test_pool_refuses_views_before_allocation_and_of_the_wrong_kind():
    plan = _plan()
    pool = UnifiedPool(plan.memory.layout)
    with pytest.raises(RuntimeError, match="not allocated"):
        pool.tensor
    pool.allocate("cpu")
    with pytest.raises(KeyError, match="is not an attention layer"):
        pool.attention_kv("target.layers.0")
    with pytest.raises(KeyError, match="is not a recurrent-state layer"):
        pool.recurrent_state("target.layers.3")
    k, v = pool.attention_kv("target.layers.3")
    half = plan.memory.layout.group_of("target.layers.3").spec.page_size_bytes // 2
    assert v.data_ptr() - k.data_ptr() == half
    assert k.numel() * k.element_size() == v.numel() * v.element_size() == half * plan.memory.layout.num_blocks


def test_allocate_puts_the_one_tensor_on_the_device_asked_and_only_once():
    pool = UnifiedPool(_plan().memory.layout)
    raw = pool.allocate("meta")                 # a device that is not torch's default
    assert raw.device.type == "meta" and pool.tensor is raw and pool.is_allocated
    with pytest.raises(RuntimeError) as exc:
        pool.allocate("meta")
    assert str(exc.value) == "the pool is already allocated"
