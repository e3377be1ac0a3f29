"""The DFlash block drafter (checkpoint names of z-lab's DFlash drafters, as vLLM's
qwen3_dflash loads them: `layers.{i}.self_attn.*`, `layers.{i}.mlp.*`, `fc`, `hidden_norm`, `norm`).

One drafting pass per sequence, after the target verified and accepted tokens:

  1. context: the target's residual stream after each of `target_layer_ids` for every
     accepted input token, concatenated and projected, `ctx = hidden_norm(fc(aux))`; each draft
     layer stores `k_norm(k_proj(ctx))` (roped at the token's position) and `v_proj(ctx)` into
     the pool at that position ("draft.layers.{i}", sharing the target's block table).
  2. query block: [bonus token, mask x k] at positions [p, p+1, .., p+k] (p = the bonus
     token's position) runs through the draft layers, attending non-causally to every
     context position and the whole block; logits at the k mask positions (through the
     target's LM head) give the k draft tokens.

The drafter shares the target's embedding and LM head unless its checkpoint has its own.
Each draft layer's q_proj, k_proj and v_proj are the row blocks of one weight (`qkv_proj`,
fused_linear.LinearGroup): the query block projects all three in one GEMM, the context k and v
in one GEMM over their two adjacent blocks; the MLP's gate and up likewise (mlp.py).
"""

from __future__ import annotations

import torch
from torch import nn

from engine_under_test.model.attention import paged_attention
from engine_under_test.model.forward_batch import ForwardBatch, LayerCache
from engine_under_test.model.fused_linear import LinearGroup
from engine_under_test.model.fused_norms import add_rms_norm
from engine_under_test.model.mlp import SwiGLUMLP
from engine_under_test.model.model_config import DraftModelConfig
from engine_under_test.model.norm import RMSNorm
from engine_under_test.model.norm_rope import norm_rope_write
from engine_under_test.model.rope import RotaryEmbedding


def draft_layer_name(i: int) -> str:
    return f"draft.layers.{i}"


class DraftAttention(nn.Module):
    def __init__(self, cfg: DraftModelConfig):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.qkv_proj = LinearGroup(self.q_proj, self.k_proj, self.v_proj)

    def write_context_kv(self, x: torch.Tensor, rope: RotaryEmbedding, cos_sin, cache: LayerCache,
                 slots: tuple[torch.Tensor, torch.Tensor]) -> None:
        """Context x [T, hidden] -> normed, roped k and v [T, Hkv, D] stored at the pool rows
        `slots` (fused: one GEMM over the k and v rows; unfused: one GEMM each, the reference)."""
        k, v = self.qkv_proj(x, members=slice(1, 3)) if self.qkv_proj.fused else (self.k_proj(x), self.v_proj(x))
        norm_rope_write(None, *self._heads(k, v), None, self.k_norm, rope, cos_sin, cache.first, cache.second, slots)

    def write_qkv(self, x: torch.Tensor, rope: RotaryEmbedding, cos_sin, cache: LayerCache,
                  slots: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """Query block x [T, hidden] -> normed, roped q [T, H, D]; its k and v stored at the pool
        rows `slots` (fused: one GEMM; unfused: one GEMM each, the reference)."""
        q, k, v = self.qkv_proj(x) if self.qkv_proj.fused else (self.q_proj(x), self.k_proj(x), self.v_proj(x))
        return norm_rope_write(q.view(x.shape[0], self.num_heads, self.head_dim), *self._heads(k, v), self.q_norm,
                               self.k_norm, rope, cos_sin, cache.first, cache.second, slots)

    def _heads(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        T = k.shape[0]
        return k.view(T, self.num_kv_heads, self.head_dim), v.view(T, self.num_kv_heads, self.head_dim)


class DraftLayer(nn.Module):
    def __init__(self, cfg: DraftModelConfig):
        super().__init__()
        self.self_attn = DraftAttention(cfg)
        self.mlp = SwiGLUMLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class DFlashDrafter(nn.Module):
    def __init__(self, cfg: DraftModelConfig, embed_tokens: nn.Embedding, lm_head: nn.Linear):
        super().__init__()
        self.config = cfg
        self.layers = nn.ModuleList([DraftLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.fc = nn.Linear(len(cfg.target_layer_ids) * cfg.target_hidden_size, cfg.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        # shared with the target (not registered as submodules: not part of the draft's state dict)
        self._shared = {"embed_tokens": embed_tokens, "lm_head": lm_head}
        self.rope = RotaryEmbedding(cfg.head_dim, cfg.rope_theta)

    @property
    def embed_tokens(self) -> nn.Embedding:
        return self._shared["embed_tokens"]

    @property
    def lm_head(self) -> nn.Linear:
        return self._shared["lm_head"]

    @torch.inference_mode()
    def write_context(self, aux_hidden: torch.Tensor, positions: torch.Tensor, slots: dict[int, torch.Tensor],
                      kv_caches: dict[str, LayerCache]) -> None:
        """Store the context K/V of accepted target tokens at pool rows `slots[group_id]` (one per token)."""
        if aux_hidden.shape[0] == 0:
            return
        ctx = self.hidden_norm(self.fc(aux_hidden.to(self.fc.weight.dtype)))
        cos_sin = self.rope.cos_sin(positions, ctx.dtype)
        for i, layer in enumerate(self.layers):
            cache = kv_caches[draft_layer_name(i)]
            layer.self_attn.write_context_kv(ctx, self.rope, cos_sin, cache, slots[cache.group_id])

    @torch.inference_mode()
    def forward(self, query_ids: torch.Tensor, batch: ForwardBatch,
                kv_caches: dict[str, LayerCache]) -> torch.Tensor:
        """The query blocks (non-causal batch) -> final-normed hidden states [T, hidden]."""
        h = self.embed_tokens(query_ids)
        cos_sin = self.rope.cos_sin(batch.positions, h.dtype)
        T = h.shape[0]
        pending = None                      # the last layer's MLP output, not yet added to h
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            if pending is None:
                x = layer.input_layernorm(h)
            else:                           # NOTE: residual add and norm fused (one kernel on CUDA)
                h, x = add_rms_norm(h, pending, layer.input_layernorm)
            cache = kv_caches[draft_layer_name(i)]
            q = attn.write_qkv(x, self.rope, cos_sin, cache, batch.slot_mapping(cache.group_id))
            o = paged_attention(q, batch, cache, attn.head_dim ** -0.5)
            h, x = add_rms_norm(h, attn.o_proj(o.reshape(T, -1)), layer.post_attention_layernorm)
            pending = layer.mlp(x)
        return add_rms_norm(h, pending, self.norm)[1]

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()
