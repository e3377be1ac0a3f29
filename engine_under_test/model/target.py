"""The Qwen3.5 hybrid target (transformers' Qwen3_5ForCausalLM: same module tree and names).

    embed_tokens -> [input_layernorm -> linear_attn | self_attn -> + -> post_attention_layernorm
                     -> mlp -> +] x num_hidden_layers -> norm -> lm_head

`forward` runs one flat batch on the pool and returns the final-normed hidden states and,
for the DFlash drafter, the residual stream after each layer in `aux_layer_ids`, concatenated
in that order ([T, len(aux_layer_ids) * hidden_size]).

Layer names in the pool: "target.layers.{i}" (attention KV for full-attention layers,
recurrent state for linear-attention layers).
"""

from __future__ import annotations

import torch
from torch import nn

from engine_under_test.model.attention import GatedAttention
from engine_under_test.model.forward_batch import ForwardBatch, LayerCache
from engine_under_test.model.fused_norms import add_rms_norm
from engine_under_test.model.linear_attention import GatedDeltaNet
from engine_under_test.model.mlp import SwiGLUMLP
from engine_under_test.model.model_config import TargetModelConfig
from engine_under_test.model.norm import ZeroCenteredRMSNorm
from engine_under_test.model.rope import RotaryEmbedding


def target_layer_name(i: int) -> str:
    return f"target.layers.{i}"


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TargetModelConfig, i: int):
        super().__init__()
        self.layer_type = cfg.layer_types[i]
        if self.layer_type == "linear_attention":
            self.linear_attn = GatedDeltaNet(cfg)
        else:
            self.self_attn = GatedAttention(cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                                            cfg.head_dim, cfg.rms_norm_eps)
        self.mlp = SwiGLUMLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class TextModel(nn.Module):
    def __init__(self, cfg: TargetModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers)])
        self.norm = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Qwen35Target(nn.Module):
    def __init__(self, cfg: TargetModelConfig):
        super().__init__()
        self.config = cfg
        self.model = TextModel(cfg)
        # NOTE: a tied head is built on the meta device: no vocab x hidden weight is allocated only to be dropped
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False,
                                 device="meta" if cfg.tie_word_embeddings else None)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.rope = RotaryEmbedding(cfg.rotary_dim, cfg.rope_theta)
        self.gdn_backend = "torch"          # gated_delta_net.BACKENDS; load_target picks fla on CUDA

    @property
    def attention_layer_ids(self) -> list[int]:
        return [i for i, t in enumerate(self.config.layer_types) if t == "full_attention"]

    @property
    def linear_layer_ids(self) -> list[int]:
        return [i for i, t in enumerate(self.config.layer_types) if t == "linear_attention"]

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, batch: ForwardBatch,
                kv_caches: dict[str, LayerCache], state_caches: dict[str, LayerCache],
                aux_layer_ids: tuple[int, ...] = ()) -> tuple[torch.Tensor, torch.Tensor | None]:
        h = self.model.embed_tokens(input_ids)
        cos_sin = self.rope.cos_sin(batch.positions, h.dtype)
        aux: dict[int, torch.Tensor] = {}
        pending = None                      # the last layer's MLP output, not yet added to h
        for i, layer in enumerate(self.model.layers):
            name = target_layer_name(i)
            if pending is None:
                x = layer.input_layernorm(h)
            else:                           # NOTE: residual add and norm fused (one kernel on CUDA)
                h, x = add_rms_norm(h, pending, layer.input_layernorm)
                if i - 1 in aux_layer_ids:
                    aux[i - 1] = h
            if layer.layer_type == "linear_attention":
                x = layer.linear_attn(x, batch, state_caches[name], self.gdn_backend)
            else:
                x = layer.self_attn(x, batch, self.rope, cos_sin, kv_caches[name])
            h, x = add_rms_norm(h, x, layer.post_attention_layernorm)
            pending = layer.mlp(x)
        h, out = add_rms_norm(h, pending, self.model.norm)
        if len(self.model.layers) - 1 in aux_layer_ids:
            aux[len(self.model.layers) - 1] = h
        aux_cat = torch.cat([aux[i] for i in aux_layer_ids], dim=-1) if aux_layer_ids else None
        return out, aux_cat

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()
