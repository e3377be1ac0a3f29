"""Memory planner and unified pool layout: bound, growth, page unification, refusals."""

from __future__ import annotations

import dataclasses

import pytest

from conformance.paths import MODELS_DIR
from engine_under_test.config import EngineConfig, SpeculativeConfig
from engine_under_test.memory.planner import MemoryRefusal, plan_memory
from engine_under_test.shapes import DTYPE_SIZE_BYTES, read_draft_shape, read_target_shape

GIB = 2**30


def _cfg(target="tiny-hybrid", draft="tiny-dflash", k=8, **kw) -> EngineConfig:
    base = dict(model=MODELS_DIR / target, max_num_seqs=4, max_model_len=2048, max_num_batched_tokens=512,
                speculative_config=SpeculativeConfig("dflash", k, MODELS_DIR / draft), kv_cache_memory_bytes=256 * 2**20)
    base.update(kw)
    return EngineConfig(**base)


def _plan(cfg: EngineConfig):
    spec = cfg.speculative_config
    return plan_memory(cfg, read_target_shape(cfg.model), read_draft_shape(spec.model) if spec else None)


def test_unified_page_holds_a_state_slot_and_is_minimal():
    cfg = _cfg()
    t = read_target_shape(cfg.model)
    plan = _plan(cfg)
    lay = plan.layout
    # independent computation: conv (kernel - 1 + k rows of conv_dim, bf16) + SSM (float32)
    g = t.gdn
    conv_dim = 2 * g.num_k_heads * g.head_k_dim + g.num_v_heads * g.head_v_dim
    state = conv_dim * (g.conv_kernel_size - 1 + 8) * 2 + g.num_v_heads * g.head_v_dim * g.head_k_dim * 4
    per_token = 2 * t.attention.num_kv_heads * t.attention.head_dim * DTYPE_SIZE_BYTES["bfloat16"]
    assert lay.page_size_bytes == lay.block_size_tokens * per_token >= state
    assert lay.block_size_tokens % 16 == 0 and (lay.block_size_tokens - 16) * per_token < state
    assert {gr.spec.page_size_bytes for gr in lay.groups} == {lay.page_size_bytes}


def test_draft_and_target_attention_share_a_group_when_specs_match():
    lay = _plan(_cfg()).layout
    groups = {lay.group_of(n).group_id for n in ("target.layers.3", "target.layers.7", "draft.layers.0", "draft.layers.1")}
    assert len(groups) == 1


def test_everything_inside_the_bound():
    plan = _plan(_cfg())
    led = plan.ledger
    assert led.outside_bound == ()
    assert led.pool_bytes == plan.layout.total_bytes <= led.bound_bytes
    assert led.bound_bytes - plan.layout.total_bytes < plan.layout.bytes_per_block


def test_gpu_memory_utilization_bounds_every_category():
    cfg = _cfg(target="qwen35-27b-shaped", draft="qwen35-27b-dflash-shaped", kv_cache_memory_bytes=None,
               gpu_memory_utilization=0.9, device_memory_bytes=150_109_880_320, max_num_seqs=32, max_model_len=8192,
               max_num_batched_tokens=8192)
    led = _plan(cfg).ledger
    assert led.total_bytes <= led.bound_bytes == int(0.9 * 150_109_880_320)
    assert led.categories["weights"] > 50 * GIB   # a 27B bf16 target


@pytest.mark.parametrize("field,small,large", [("max_num_seqs", 8, 32), ("max_model_len", 2048, 8192)])
def test_draft_kv_need_grows_with_seqs_and_len(field, small, large):
    kw = dict(target="qwen35-27b-shaped", draft="qwen35-27b-dflash-shaped", k=7, kv_cache_memory_bytes=80 * GIB,
              max_num_seqs=8, max_model_len=8192, max_num_batched_tokens=8192)
    a = _plan(_cfg(**{**kw, field: small}))
    b = _plan(_cfg(**{**kw, field: large}))
    need = lambda p, cfg_seqs: p.per_sequence.draft_kv_bytes * cfg_seqs
    seqs_a = small if field == "max_num_seqs" else 8
    seqs_b = large if field == "max_num_seqs" else 8
    assert need(b, seqs_b) > need(a, seqs_a)
    if field == "max_model_len":
        assert b.per_sequence.draft_kv_bytes > a.per_sequence.draft_kv_bytes
        assert b.per_sequence.attention_kv_bytes > a.per_sequence.attention_kv_bytes
    for p in (a, b):
        assert p.ledger.pool_bytes <= p.ledger.bound_bytes and p.ledger.categories["draft_kv"] > 0


def test_state_slots_one_plus_k_or_two_plus_k_in_align_mode():
    assert _plan(_cfg(k=8)).per_sequence.state_slots == 9
    assert _plan(_cfg(k=8, enable_prefix_caching=True)).per_sequence.state_slots == 10
    assert _plan(_cfg(k=3)).per_sequence.state_slots == 4


def test_seats_32_at_k8_in_80_gib_and_says_why_when_fewer():
    kw = dict(target="qwen35-27b-shaped", draft="qwen35-27b-dflash-shaped", k=8, max_num_seqs=32,
              max_model_len=8192, max_num_batched_tokens=8192)
    plan = _plan(_cfg(**kw, kv_cache_memory_bytes=80 * GIB))
    assert plan.num_seats >= 32 and plan.seat_message is None
    small = _plan(_cfg(**kw, kv_cache_memory_bytes=40 * GIB))
    assert small.num_seats < 32
    assert f"seats {small.num_seats} full-length sequences" in small.seat_message
    assert small.num_seats == (small.layout.num_blocks - 1) // small.per_sequence.num_blocks


def test_refuses_when_one_sequence_does_not_fit():
    with pytest.raises(MemoryRefusal, match="to serve one request of max_model_len 2048"):
        _plan(_cfg(kv_cache_memory_bytes=4 * 2**20))


def test_num_gpu_blocks_override_cannot_exceed_the_bound():
    with pytest.raises(MemoryRefusal, match="num_gpu_blocks_override"):
        _plan(_cfg(num_gpu_blocks_override=10**6))
    assert _plan(_cfg(num_gpu_blocks_override=100)).layout.num_blocks == 100


@pytest.mark.parametrize("field,value", [("max_num_seqs", 0), ("block_size", -1), ("mamba_ssm_cache_dtype", "int8"),
                                         ("kv_cache_memory_bytes", None), ("gpu_memory_utilization", 1.5)])
def test_config_errors_name_the_field(field, value):
    with pytest.raises(ValueError, match=field if value is not None else "kv_cache_memory_bytes"):
        dataclasses.replace(_cfg(), **{field: value})


def test_cuda_context_is_planned_inside_the_bound_on_cuda_only():
    kw = dict(target="qwen35-2b-shaped", draft="qwen35-2b-dflash-shaped", kv_cache_memory_bytes=None,
              gpu_memory_utilization=0.9, device_memory_bytes=150_109_880_320, max_num_seqs=8, max_model_len=4096,
              max_num_batched_tokens=8192)
    from engine_under_test.memory.planner import CUDA_CONTEXT_BYTES

    on_cuda, on_cpu = _plan(_cfg(device="cuda", **kw)), _plan(_cfg(device="cpu", **kw))
    assert on_cuda.ledger.categories["cuda_context"] == CUDA_CONTEXT_BYTES
    assert "cuda_context" not in on_cpu.ledger.categories
    assert on_cuda.ledger.total_bytes <= on_cuda.ledger.bound_bytes
    # the context's bytes come out of the pool, not from beyond the bound
    pool = lambda p: p.layout.total_bytes
    assert pool(on_cpu) - pool(on_cuda) >= CUDA_CONTEXT_BYTES - on_cuda.layout.bytes_per_block
