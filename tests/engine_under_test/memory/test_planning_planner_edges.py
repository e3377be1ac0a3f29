"""The memory planner at its boundaries and in its messages (engine_under_test.memory.planner).

- a utilization bound that leaves no room for the pool is refused with every figure beside it;
- num_gpu_blocks_override equal to what fits is accepted (only more is refused);
- one full-length sequence that exactly fits is planned; the refusal says how many blocks it
  needs and how many usable blocks the bound gives (never negative);
- seats = (num_blocks - 1 null block) // blocks per sequence, max_concurrency = num_blocks /
  blocks per sequence; the seat message is set only below max_num_seqs and carries the figures;
- the ledger's beside-pool figures: weights = parameters x dtype size (target + drafter),
  activations and workspace from the documented formulas; the pool's shares sum to its bytes.
"""

from __future__ import annotations

import pytest

from conformance.paths import MODELS_DIR
from engine_under_test.config import EngineConfig, SpeculativeConfig
from engine_under_test.memory.planner import (GRAPH_POOL_BASE_BYTES, NUM_NULL_BLOCKS, MemoryRefusal, activation_bytes,
                                              layer_category, plan_memory, weights_bytes, workspace_bytes)
from engine_under_test.shapes import DTYPE_SIZE_BYTES, read_draft_shape, read_target_shape


def _cfg(**kw) -> EngineConfig:
    base = dict(model=MODELS_DIR / "tiny-hybrid", max_num_seqs=4, max_model_len=2048, max_num_batched_tokens=512,
                speculative_config=SpeculativeConfig("dflash", 8, MODELS_DIR / "tiny-dflash"),
                kv_cache_memory_bytes=256 * 2**20)
    base.update(kw)
    return EngineConfig(**base)


def _plan(cfg: EngineConfig):
    spec = cfg.speculative_config
    return plan_memory(cfg, read_target_shape(cfg.model), read_draft_shape(spec.model) if spec else None)


def test_utilization_with_no_room_for_the_pool_is_refused_with_the_figures():
    cfg = _cfg(kv_cache_memory_bytes=None, gpu_memory_utilization=0.5, device_memory_bytes=2**29, device="cuda")
    with pytest.raises(MemoryRefusal) as exc:
        _plan(cfg)
    msg = str(exc.value)
    assert msg.startswith("gpu_memory_utilization 0.5 of 0.50 GiB is 0.25 GiB: weights ")
    assert "CUDA context 1.00 GiB leave no room for the cache pool" in msg
    t = read_target_shape(cfg.model)
    assert f"workspace {workspace_bytes(cfg, t) / 2**30:.2f} GiB" in msg
    assert f"activations {activation_bytes(cfg, t) / 2**30:.2f} GiB" in msg


def test_override_equal_to_what_fits_is_accepted():
    fits = _plan(_cfg()).layout.num_blocks
    assert _plan(_cfg(num_gpu_blocks_override=fits)).layout.num_blocks == fits
    with pytest.raises(MemoryRefusal, match=f"{fits + 1} blocks of .* exceed the bound \\({fits} blocks fit"):
        _plan(_cfg(num_gpu_blocks_override=fits + 1))


def test_one_sequence_that_exactly_fits_is_planned_and_one_less_is_refused():
    per = _plan(_cfg()).per_sequence.num_blocks
    exact = _plan(_cfg(num_gpu_blocks_override=per + NUM_NULL_BLOCKS))
    assert exact.num_seats == 1 and exact.max_concurrency == (per + 1) / per
    with pytest.raises(MemoryRefusal, match=f"needs {per} blocks .* gives it {per - 1} usable blocks"):
        _plan(_cfg(num_gpu_blocks_override=per))
    with pytest.raises(MemoryRefusal, match="gives it 0 usable blocks"):
        _plan(_cfg(num_gpu_blocks_override=1))


def test_seats_and_the_seat_message():
    per = _plan(_cfg()).per_sequence.num_blocks
    four = _plan(_cfg(num_gpu_blocks_override=4 * per + 1))
    assert four.num_seats == 4 and four.seat_message is None
    three = _plan(_cfg(num_gpu_blocks_override=4 * per))
    assert three.num_seats == 3 and three.max_concurrency == 4.0
    assert three.seat_message.startswith(f"the pool seats 3 full-length sequences (max_num_seqs 4): each needs {per} blocks")
    assert f"gives {4 * per - 1} usable blocks" in three.seat_message and "max_concurrency 4.00" in three.seat_message


def test_beside_pool_figures():
    cfg = _cfg()
    t, d = read_target_shape(cfg.model), read_draft_shape(cfg.speculative_config.model)
    w_target = t.num_params * DTYPE_SIZE_BYTES[t.dtype]
    assert weights_bytes(t, None) == w_target
    assert weights_bytes(t, d) == w_target + d.num_params(t.hidden_size) * DTYPE_SIZE_BYTES[d.dtype]
    rows = cfg.max_num_seqs * (1 + 8)
    logits = 2 * rows * t.vocab_size * 4
    per_token = (activation_bytes(cfg, t) - logits) // cfg.max_num_batched_tokens
    assert (activation_bytes(cfg, t) - logits) % cfg.max_num_batched_tokens == 0
    assert per_token >= DTYPE_SIZE_BYTES[t.dtype] * (2 * t.hidden_size + 2 * t.intermediate_size)
    g = t.gdn
    assert workspace_bytes(cfg, t) == cfg.max_num_batched_tokens * g.num_v_heads * g.head_v_dim * 8 + _graph_bytes(cfg, t)


def test_pool_shares_sum_to_the_pool_and_name_their_category():
    plan = _plan(_cfg())
    cats = plan.ledger.categories
    pool = sum(cats[c] for c in ("attention_kv", "recurrent_state", "draft_kv", "padding", "unused", "unassigned"))
    assert pool == plan.layout.total_bytes and cats["draft_kv"] > 0 and cats["recurrent_state"] > 0
    lay = plan.layout
    assert layer_category("draft.layers.0", lay.group_of("draft.layers.0")) == "draft_kv"
    assert layer_category("target.layers.3", lay.group_of("target.layers.3")) == "attention_kv"
    assert layer_category("target.layers.0", lay.group_of("target.layers.0")) == "recurrent_state"


def _beside(cfg: EngineConfig) -> int:
    t, d = read_target_shape(cfg.model), read_draft_shape(cfg.speculative_config.model)
    return weights_bytes(t, d) + activation_bytes(cfg, t) + workspace_bytes(cfg, t)


def test_utilization_leaving_exactly_one_block_is_not_the_no_room_refusal():
    probe = _cfg(kv_cache_memory_bytes=None, gpu_memory_utilization=1.0, device_memory_bytes=2**40)
    bpb = _plan(probe).layout.bytes_per_block
    assert _plan(probe).ledger.bound_kind == "gpu_memory_utilization"
    one_block = _cfg(kv_cache_memory_bytes=None, gpu_memory_utilization=1.0, device_memory_bytes=_beside(probe) + bpb)
    with pytest.raises(MemoryRefusal, match="to serve one request"):      # one block: only the null block
        _plan(one_block)
    short = _cfg(kv_cache_memory_bytes=None, gpu_memory_utilization=1.0, device_memory_bytes=_beside(probe) + bpb - 1)
    with pytest.raises(MemoryRefusal, match=r"\+ CUDA context 0\.00 GiB leave no room for the cache pool"):
        _plan(short)


def test_pool_shares_are_whole_bytes_when_blocks_do_not_divide():
    per = _plan(_cfg()).per_sequence.num_blocks
    plan = _plan(_cfg(num_gpu_blocks_override=3 * per + 2))
    cats = plan.ledger.categories
    assert all(type(v) is int for v in cats.values()), cats
    assert cats["unassigned"] > 0
    assert plan.ledger.pool_bytes == plan.layout.total_bytes


def test_a_target_without_gdn_layers_has_no_kernel_scratch():
    import dataclasses

    cfg = _cfg()
    t = dataclasses.replace(read_target_shape(cfg.model), gdn=None)
    assert workspace_bytes(cfg, t) == _graph_bytes(cfg, t)
    a = t.attention
    widest = max(2 * t.intermediate_size, t.num_attention_heads * a.head_dim * 2 + 2 * a.num_kv_heads * a.head_dim)
    rows = cfg.max_num_seqs * (1 + 8)
    assert activation_bytes(cfg, t) == (cfg.max_num_batched_tokens * DTYPE_SIZE_BYTES[t.dtype] * (2 * t.hidden_size + widest)
                                        + 2 * rows * t.vocab_size * 4)


def _activation_formula(cfg, t) -> int:
    a, g = t.attention, t.gdn
    widths = [2 * t.intermediate_size, t.num_attention_heads * a.head_dim * 2 + 2 * a.num_kv_heads * a.head_dim]
    if g is not None:
        widths.append(2 * g.num_k_heads * g.head_k_dim + 2 * g.num_v_heads * g.head_v_dim + 2 * g.num_v_heads)
    rows = cfg.max_num_seqs * (1 + cfg.num_speculative_tokens)
    return cfg.max_num_batched_tokens * DTYPE_SIZE_BYTES[t.dtype] * (2 * t.hidden_size + max(widths)) + 2 * rows * t.vocab_size * 4


@pytest.mark.parametrize("widest", ["mlp", "attention", "gdn"])
def test_activations_take_the_widest_projection(widest):
    """Each of the three widths is made the widest in turn (the shipped models are all MLP-wide)."""
    import dataclasses

    cfg = _cfg()
    t = read_target_shape(cfg.model)
    a, g = t.attention, t.gdn
    if widest != "mlp":
        t = dataclasses.replace(t, intermediate_size=1)
    if widest == "attention":
        t = dataclasses.replace(t, attention=dataclasses.replace(a, head_dim=4 * a.head_dim),
                                gdn=dataclasses.replace(g, head_k_dim=1, head_v_dim=1))
    if widest == "gdn":
        t = dataclasses.replace(t, gdn=dataclasses.replace(g, head_k_dim=8 * g.head_k_dim, head_v_dim=8 * g.head_v_dim))
    assert activation_bytes(cfg, t) == _activation_formula(cfg, t)


def _graph_bytes(cfg, t) -> int:
    """The graphs' logits buffer (max_num_seqs x (1 + k) rows of the vocabulary), the verify
    pass's kept inputs (every GDN layer's conv inputs, k and v in the model dtype and two float32
    gates a row) plus the base."""
    rows = cfg.max_num_seqs * (1 + cfg.num_speculative_tokens)
    size = 2 if t.dtype in ("bfloat16", "float16") else 4
    g, kept = t.gdn, 0
    if g is not None and cfg.num_speculative_tokens:
        conv_dim = 2 * g.num_k_heads * g.head_k_dim + g.num_v_heads * g.head_v_dim
        kept = len(t.gdn_layer_ids) * rows * ((conv_dim + g.num_k_heads * g.head_k_dim + g.num_v_heads * g.head_v_dim)
                                              * size + 2 * g.num_v_heads * 4)
    return GRAPH_POOL_BASE_BYTES + rows * t.vocab_size * size + kept
