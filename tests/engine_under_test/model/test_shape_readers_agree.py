"""The planner (engine_under_test.shapes) and the model (engine_under_test.model.model_config) read the
same config.json for different purposes; the geometry they share must agree on every shipped shape, or
the pool would be sized for a model the runner does not build."""

from __future__ import annotations

import pytest

from conformance import paths
from engine_under_test.model.model_config import DraftModelConfig, TargetModelConfig
from engine_under_test.shapes import read_draft_shape, read_target_shape

TARGETS = ["tiny-hybrid", "qwen35-2b-shaped", "qwen35-27b-shaped"]
DRAFTS = [("tiny-dflash", "tiny-hybrid"), ("qwen35-2b-dflash-shaped", "qwen35-2b-shaped"),
          ("qwen35-27b-dflash-shaped", "qwen35-27b-shaped")]


@pytest.mark.parametrize("name", TARGETS)
def test_target_geometry_agrees(name):
    d = paths.MODELS_DIR / name
    plan, model = read_target_shape(d), TargetModelConfig.from_dir(d)
    assert plan.num_layers == model.num_hidden_layers
    assert plan.attention_layer_ids == tuple(i for i, t in enumerate(model.layer_types) if t == "full_attention")
    assert plan.gdn_layer_ids == tuple(i for i, t in enumerate(model.layer_types) if t == "linear_attention")
    assert (plan.attention.num_kv_heads, plan.attention.head_dim) == (model.num_key_value_heads, model.head_dim)
    g = plan.gdn
    assert (g.num_k_heads, g.num_v_heads, g.head_k_dim, g.head_v_dim, g.conv_kernel_size) == (
        model.linear_num_key_heads, model.linear_num_value_heads, model.linear_key_head_dim,
        model.linear_value_head_dim, model.linear_conv_kernel_dim)
    assert g.conv_dim == model.conv_dim
    assert (plan.hidden_size, plan.vocab_size, plan.tie_word_embeddings) == (
        model.hidden_size, model.vocab_size, model.tie_word_embeddings)


@pytest.mark.parametrize("draft, target", DRAFTS)
def test_draft_geometry_agrees(draft, target):
    d = paths.MODELS_DIR / draft
    plan = read_draft_shape(d)
    model = DraftModelConfig.from_dir(d, target_hidden_size=TargetModelConfig.from_dir(paths.MODELS_DIR / target).hidden_size)
    assert plan.num_layers == model.num_hidden_layers
    assert (plan.attention.num_kv_heads, plan.attention.head_dim) == (model.num_key_value_heads, model.head_dim)
    assert plan.block_size_tokens == model.block_size
    assert plan.num_target_features == len(model.target_layer_ids)


def test_both_readers_default_the_output_gate_alike(tmp_path):
    """A config.json without attn_output_gate: the planner's shape and the model's config agree (gated)."""
    import json

    from engine_under_test.model.model_config import TargetModelConfig
    from engine_under_test.shapes import read_target_shape
    from conformance import paths

    doc = json.loads((paths.MODELS_DIR / "tiny-hybrid" / "config.json").read_text())
    doc.pop("attn_output_gate")
    (tmp_path / "config.json").write_text(json.dumps(doc))
    assert read_target_shape(tmp_path).attn_output_gate is True
    assert TargetModelConfig.from_dir(tmp_path).attn_output_gate is True


def test_vllm_style_imports():
    from engine_under_test import LLM, SamplingParams

    assert LLM.__name__ == "LLM" and SamplingParams.__name__ == "SamplingParams"
