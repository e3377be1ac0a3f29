"""Gated full attention (Qwen3.5) and paged attention over the pool.

Target layer: q_proj yields query and output gate per head (`[.., heads, 2 * head_dim]`, query
first), q_norm / k_norm are per-head zero-centered RMSNorms, rope covers the first
`partial_rotary_factor * head_dim` dims, and the output is `o_proj(attn * sigmoid(gate))`.
q_proj, k_proj and v_proj are one GEMM: the row blocks [q_proj; k_proj; v_proj] of one weight
(`self.qkv_proj`, fused_linear.LinearGroup), their outputs column views of one product.

q / k norms, rope and the K/V write into the pool rows of their positions are one call
(norm_rope.py: one kernel on CUDA); the output gate is `fused_gates.sigmoid_mul`.
`paged_attention` reads this pass's K/V (already written) from the pool; per group
(`ForwardBatch.groups`: equal query lengths, or prompt chunks padded to the longest, whose pad
rows repeat a real query and are never written back), gathers each sequence's blocks through
its block table and runs SDPA with a mask (causal by position, or full for the DFlash drafter's
block queries);
block tables and masks are built once per pass (`ForwardBatch.memo`) and shared by the layers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine_under_test.model.forward_batch import ForwardBatch, LayerCache, device_tensor
from engine_under_test.model.fused_gates import sigmoid_mul
from engine_under_test.model.fused_linear import LinearGroup
from engine_under_test.model.norm_rope import norm_rope_write
from engine_under_test.model.norm import ZeroCenteredRMSNorm
from engine_under_test.model.rope import RotaryEmbedding


def _group_mask(batch: ForwardBatch, group_id: int, seqs: list[int], query_len: int, num_blocks: int) -> torch.Tensor:
    """[G, L, S] (causal) or [G, 1, S] bool: which of the S = num_blocks * block_size gathered
    rows each query may read (rows below the sequence's length, and up to its position)."""
    def build() -> torch.Tensor:
        device = batch.positions.device
        kv_pos = torch.arange(num_blocks * batch.block_size_tokens, device=device)
        lens = device_tensor([batch.seq_lens[b] for b in seqs], device)
        mask = kv_pos[None, None, :] < lens[:, None, None]
        if batch.causal:
            mask = mask & (kv_pos[None, None, :] <= batch.positions[batch.token_index(seqs, query_len)][:, :, None])
        return mask
    return batch.memo(("attn_mask", group_id, tuple(seqs), query_len), build)


def paged_attention(q: torch.Tensor, batch: ForwardBatch, cache: LayerCache, scale: float) -> torch.Tensor:
    """q [T, H, D] over the pool's K/V (already written) -> [T, H, D].

    NOTE: grouped-query heads are folded into the query axis (the H / Hkv query heads of one
    KV head become rep x L query rows), so SDPA sees equal head counts and can take its
    memory-efficient kernel with a mask; `enable_gqa` with a mask falls back to the math kernel.
    """
    k_cache, v_cache, gid = cache
    if getattr(batch, "is_static", False):      # fixed-shape device metadata (a CUDA graph's pass)
        from engine_under_test.model.static_batch import static_paged_attention

        return static_paged_attention(q, batch, k_cache, v_cache, gid, scale)
    bs = batch.block_size_tokens
    T, H, D = q.shape
    num_kv_heads = k_cache.shape[2]
    rep = H // num_kv_heads
    out = torch.empty_like(q)
    for seqs, qlen in batch.groups():
        G = len(seqs)
        nb = -(-max(batch.seq_lens[b] for b in seqs) // bs)
        table = batch.memo(("attn_table", gid, tuple(seqs)), lambda: batch.padded_block_table(gid, seqs, nb))
        keys = k_cache[table].flatten(1, 2).transpose(1, 2)             # [G, Hkv, S, D]
        values = v_cache[table].flatten(1, 2).transpose(1, 2)
        mask = _group_mask(batch, gid, seqs, qlen, nb)                   # [G, L or 1, S]
        if mask.shape[1] > 1 and rep > 1:
            mask = batch.memo(("attn_mask_rep", gid, tuple(seqs), qlen, rep),
                              lambda: mask[:, None].expand(G, rep, qlen, mask.shape[-1]).reshape(G, rep * qlen, -1))
        qg = batch.gather(q, seqs, qlen).reshape(G, qlen, num_kv_heads, rep, D).permute(0, 2, 3, 1, 4).reshape(G, num_kv_heads, rep * qlen, D)
        o = F.scaled_dot_product_attention(qg, keys.to(q.dtype), values.to(q.dtype), attn_mask=mask[:, None],
                                           scale=scale)                  # [G, Hkv, rep * L, D]
        batch.scatter_(out, o.view(G, num_kv_heads, rep, qlen, D).permute(0, 3, 1, 2, 4).reshape(G * qlen, H, D),
                       seqs, qlen)
    return out


class GatedAttention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int, eps: float):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.q_proj = nn.Linear(hidden_size, num_heads * head_dim * 2, bias=False)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden_size, bias=False)
        self.q_norm = ZeroCenteredRMSNorm(head_dim, eps)
        self.k_norm = ZeroCenteredRMSNorm(head_dim, eps)
        self.qkv_proj = LinearGroup(self.q_proj, self.k_proj, self.v_proj)

    def forward(self, x: torch.Tensor, batch: ForwardBatch, rope: RotaryEmbedding,
                cos_sin: tuple[torch.Tensor, torch.Tensor], kv_cache: LayerCache) -> torch.Tensor:
        T = x.shape[0]
        q_gate, k, v = self._projections(x)
        q, gate = q_gate.view(T, self.num_heads, 2 * self.head_dim).chunk(2, dim=-1)
        # NOTE: peak memory: the projection lives on (the gate), the roped keys go straight to the pool
        q = norm_rope_write(q, k.view(T, self.num_kv_heads, self.head_dim), v.view(T, self.num_kv_heads, self.head_dim),
                            self.q_norm, self.k_norm, rope, cos_sin, kv_cache.first, kv_cache.second,
                            batch.slot_mapping(kv_cache.group_id))
        del k, v
        o = paged_attention(q, batch, kv_cache, self.head_dim ** -0.5)
        return self.o_proj(sigmoid_mul(o, gate).reshape(T, -1))

    def _projections(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(q and gate [T, 2 H D], k, v [T, Hkv D]): column views of one GEMM while fused, else one
        GEMM per projection (the reference the fused path is checked against)."""
        if self.qkv_proj.fused:
            return self.qkv_proj(x)
        return self.q_proj(x), self.k_proj(x), self.v_proj(x)
