"""Budget refusals and the active-sequence cap at their exact boundaries (engine_under_test.budget).

- chunked prefill off: max_num_batched_tokens == max_model_len is served, one less is refused;
- max_num_batched_tokens == max_num_seqs is served, one less is refused, each with its message;
- without speculation the budget has no slots, no lookahead and no cap;
- the DFlash cap applies only when max_num_batched_tokens // lookahead < max_num_seqs, and only
  then says why (the reason is None otherwise);
- model limits: max_model_len == max_position_embeddings is served; the drafter-block limit
  applies to DFlash only.
"""

from __future__ import annotations

import pytest

from conformance.paths import MODELS_DIR
from engine_under_test.budget import BudgetRefusal, check_model_limits, resolve_budget
from engine_under_test.config import EngineConfig, SpeculativeConfig
from engine_under_test.shapes import read_draft_shape, read_target_shape


def _cfg(method="dflash", k=8, **kw) -> EngineConfig:
    spec = SpeculativeConfig(method, k, MODELS_DIR / "tiny-dflash") if method else None
    base = dict(model=MODELS_DIR / "tiny-hybrid", max_num_seqs=4, max_model_len=2048, max_num_batched_tokens=512,
                speculative_config=spec, kv_cache_memory_bytes=256 * 2**20)
    base.update(kw)
    return EngineConfig(**base)


def test_chunked_prefill_off_needs_max_model_len_tokens_per_step():
    assert resolve_budget(_cfg(enable_chunked_prefill=False, max_num_batched_tokens=2048)).max_num_batched_tokens == 2048
    with pytest.raises(BudgetRefusal) as exc:
        resolve_budget(_cfg(enable_chunked_prefill=False, max_num_batched_tokens=2047))
    assert str(exc.value) == ("max_num_batched_tokens (2047) is smaller than max_model_len (2048) with chunked prefill "
                              "off: longer sequences could never be scheduled")


def test_max_num_batched_tokens_at_least_max_num_seqs():
    assert resolve_budget(_cfg(None, max_num_seqs=64, max_num_batched_tokens=64)).max_active_seqs == 64
    with pytest.raises(BudgetRefusal) as exc:
        resolve_budget(_cfg(None, max_num_seqs=64, max_num_batched_tokens=63))
    assert str(exc.value) == "max_num_batched_tokens (63) must be >= max_num_seqs (64)"


def test_no_speculation_has_no_reservation_and_no_cap():
    b = resolve_budget(_cfg(None, max_num_seqs=8, max_num_batched_tokens=8))
    assert (b.drafting_slots_per_request, b.lookahead_tokens, b.max_active_seqs, b.active_cap_reason) == (0, 0, 8, None)


def test_dflash_cap_only_below_max_num_seqs_and_only_then_a_reason():
    exact = resolve_budget(_cfg(max_num_seqs=4, max_num_batched_tokens=36))     # 36 // 9 == 4
    assert exact.max_active_seqs == 4 and exact.active_cap_reason is None
    loose = resolve_budget(_cfg(max_num_seqs=4, max_num_batched_tokens=512))
    assert loose.max_active_seqs == 4 and loose.active_cap_reason is None
    capped = resolve_budget(_cfg(max_num_seqs=4, max_num_batched_tokens=35))    # 35 // 9 == 3
    assert capped.max_active_seqs == 3
    assert capped.active_cap_reason == ("the dflash draft pass needs 9 query tokens per request within "
                                        "max_num_batched_tokens=35: at most 3 active sequences (max_num_seqs 4)")


def test_model_limits_at_the_boundary_and_dflash_only():
    target = read_target_shape(MODELS_DIR / "tiny-hybrid")
    draft = read_draft_shape(MODELS_DIR / "tiny-dflash")
    most = target.max_position_embeddings
    check_model_limits(_cfg(max_model_len=most), target, draft)
    with pytest.raises(BudgetRefusal, match=f"max_model_len \\({most + 1}\\) is greater than"):
        check_model_limits(_cfg(max_model_len=most + 1), target, draft)
    check_model_limits(_cfg("eagle3", k=draft.block_size_tokens + 3), target, draft)   # DFlash's block only
    check_model_limits(_cfg(k=draft.block_size_tokens - 1), target, draft)
    with pytest.raises(BudgetRefusal, match="exceeds what the DFlash drafter proposes per block"):
        check_model_limits(_cfg(k=draft.block_size_tokens), target, draft)


def test_align_mode_refuses_a_step_too_small_for_one_block():
    """With prefix caching on, a prompt chunk ends on a block boundary: a step whose room for one request
    (max_num_batched_tokens less pard's k drafting slots) is under one block would never schedule a long
    prompt (the scheduler ran 5,000 empty steps). The engine refuses the config instead, saying why."""
    import pytest

    from engine_under_test.budget import BudgetRefusal
    from engine_under_test.config import EngineConfig, SpeculativeConfig
    from engine_under_test.engine_plan import build_plan
    from conformance import paths

    def cfg(mnbt: int) -> EngineConfig:
        return EngineConfig(model=paths.MODELS_DIR / "tiny-hybrid", max_num_seqs=1, max_model_len=512,
                            max_num_batched_tokens=mnbt, enable_prefix_caching=True,
                            speculative_config=SpeculativeConfig("pard", 8, paths.MODELS_DIR / "tiny-qwen3-draft"),
                            kv_cache_memory_bytes=1 << 30)
    block = build_plan(cfg(512)).memory.layout.block_size_tokens
    with pytest.raises(BudgetRefusal, match=rf"leaves {block + 8 - 1 - 8} tokens a step, under one {block}-token block"):
        build_plan(cfg(block + 8 - 1))
    assert build_plan(cfg(block + 8)).budget.max_num_batched_tokens == block + 8   # one block fits: planned
