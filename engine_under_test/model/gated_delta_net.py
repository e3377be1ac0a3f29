"""Gated-DeltaNet kernels: causal conv1d and the gated delta rule, torch reference and fla-core.

Layouts (batched over G sequences of equal length L):
  x          [G, L, C]          conv input (the in_proj_qkv output), C = conv_dim
  conv_state [G, C, K - 1]      the last K - 1 conv inputs before this chunk
  q, k       [G, L, Hk, Dk]     v [G, L, Hv, Dv]; g, beta [G, L, Hv]
  ssm_state  [G, Hv, Dk, Dv]    (transformers' and fla's layout)

Each kernel returns either the state after the last position only or, for verification,
the state after every position (`save_all_states=True`), which the layer writes into one
snapshot slot per position:

    position:   0      1      2   ...  L-1
    state out: S_0    S_1    S_2  ...  S_{L-1}    (S_i = state after consuming token i)

The torch reference kernels run anywhere; backend "fla" (CUDA) imports fla-core's
`chunk_gated_delta_rule` / `fused_recurrent_gated_delta_rule` lazily, and the layer runs
snapshot passes through one kernel of its own (`gdn_snapshots.py`); "fla_per_position" runs
snapshots as one fla recurrent call per position (the slower first version, kept to compare).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from engine_under_test.model import fused_norms
from engine_under_test.model.forward_batch import device_tensor


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


# ---- causal conv1d ---------------------------------------------------------------------------


def causal_conv1d(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor,
                  save_all_states: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """SiLU(depthwise causal conv) of x continuing from conv_state.

    Returns (out [G, L, C], states): states is [G, L, C, K-1] when save_all_states, else
    [G, C, K-1] (after the last position).
    """
    num_channels, kernel = weight.shape
    seq_len = x.shape[1]
    full = torch.cat([conv_state.to(weight.dtype), x.transpose(1, 2).to(weight.dtype)], dim=-1)
    out = F.conv1d(full, weight[:, None, :], groups=num_channels)  # [G, C, L]
    out = F.silu(out, inplace=True).transpose(1, 2).to(x.dtype)
    if save_all_states:
        # window i+1 .. i+K-1 of `full` is the state after token i
        states = full.unfold(-1, kernel - 1, 1)[:, :, 1:seq_len + 1, :].permute(0, 2, 1, 3)
    else:
        states = full[:, :, full.shape[-1] - (kernel - 1):].clone()      # not a view: `full` is freed here
    return out, states


# ---- gated delta rule, torch reference --------------------------------------------------------


def _prepare(q, k, v, g, beta):
    num_v_heads = v.shape[2]
    if q.shape[2] != num_v_heads:
        rep = num_v_heads // q.shape[2]
        q = q.repeat_interleave(rep, dim=2)
        k = k.repeat_interleave(rep, dim=2)
    q = l2norm(q.float())
    k = l2norm(k.float())
    q = q * (q.shape[-1] ** -0.5)
    return q, k, v.float(), g.float(), beta.float()


def recurrent_gated_delta_rule(q, k, v, g, beta, ssm_state, save_all_states: bool):
    """Token-by-token form. Returns (o [G, L, Hv, Dv], states)."""
    out_dtype = v.dtype
    q, k, v, g, beta = _prepare(q, k, v, g, beta)
    state = ssm_state.float().clone()
    outs, states = [], []
    for t in range(q.shape[1]):
        state = state * g[:, t].exp()[..., None, None]
        kv_mem = (state * k[:, t, :, :, None]).sum(dim=-2)
        delta = (v[:, t] - kv_mem) * beta[:, t, :, None]
        state = state + k[:, t, :, :, None] * delta[:, :, None, :]
        outs.append((state * q[:, t, :, :, None]).sum(dim=-2))
        if save_all_states:
            states.append(state)
    o = torch.stack(outs, dim=1).to(out_dtype)
    return o, (torch.stack(states, dim=1) if save_all_states else state)


def chunk_gated_delta_rule(q, k, v, g, beta, ssm_state, chunk_size: int = 64):
    """Chunked (UT-transform) form for prefill. Returns (o [G, L, Hv, Dv], final state)."""
    out_dtype = v.dtype
    q, k, v, g, beta = _prepare(q, k, v, g, beta)
    # to [G, H, L, D]
    q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    g, beta = g.transpose(1, 2), beta.transpose(1, 2)
    seq_len = q.shape[2]
    pad = (chunk_size - seq_len % chunk_size) % chunk_size
    q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
    g, beta = F.pad(g, (0, pad)), F.pad(beta, (0, pad))
    G, H, Lp, Dk = k.shape
    n = Lp // chunk_size
    k_beta, v_beta = k * beta[..., None], v * beta[..., None]
    q, k, k_beta, v_beta = (x.reshape(G, H, n, chunk_size, x.shape[-1]) for x in (q, k, k_beta, v_beta))
    g = g.reshape(G, H, n, chunk_size).cumsum(dim=-1)
    upper = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).triu(1)
    decay = (g[..., :, None] - g[..., None, :]).masked_fill(upper, float("-inf")).exp()
    ut = (k_beta @ k.transpose(-1, -2)) * decay
    # (I + strictly-lower(ut)) x = rhs
    ut = ut.masked_fill(~torch.ones_like(upper).tril(-1), 0.0) + torch.eye(chunk_size, device=q.device)
    u = torch.linalg.solve_triangular(ut, v_beta, upper=False, unitriangular=True)
    w = torch.linalg.solve_triangular(ut, k_beta * g.exp()[..., None], upper=False, unitriangular=True)
    intra = (q @ k.transpose(-1, -2)) * decay
    state = ssm_state.float().clone()
    q_dec = q * g.exp()[..., None]
    k_dec = k * (g[..., -1:] - g).exp()[..., None]
    out = torch.empty_like(u)
    for i in range(n):
        v_new = u[:, :, i] - w[:, :, i] @ state
        out[:, :, i] = q_dec[:, :, i] @ state + intra[:, :, i] @ v_new
        state = state * g[:, :, i, -1].exp()[..., None, None] + k_dec[:, :, i].transpose(-1, -2) @ v_new
    out = out.reshape(G, H, Lp, -1)[:, :, :seq_len].transpose(1, 2).to(out_dtype)
    return out, state


# ---- fla-core (CUDA) --------------------------------------------------------------------------

BACKENDS = ("torch", "fla", "fla_per_position")
CHUNK_MIN_TOKENS = 64      # fla's chunk: shorter inputs (decode) take the recurrent kernel


def l2norm_float32(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last axis, computed in float32, returned in x's dtype
    (what fla's `use_qk_l2norm_in_kernel` computes before its chunked kernels): one Triton kernel
    on CUDA for a contiguous x, else the torch ops (`fused_norms.l2_norm`). NOTE: peak memory: the
    torch ops reduce x without a float32 copy of it; one float32 product is alive."""
    return fused_norms.l2_norm(x, eps)


FLA_CHUNK_TOKENS = 64      # fla's chunk size for the gated delta rule (its default)


class VarlenPacking(NamedTuple):
    """G sequences of L tokens as one packed fla batch: built once per pass on the host, shared by
    every Gated-DeltaNet layer of it (the same tensor objects, so fla's identity-keyed caches of
    what it derives from `cu_seqlens` hit from the second layer on).

    NOTE: fla derives `chunk_indices` from a device `cu_seqlens` with `repeat_interleave` over
    device counts, which reads the count on the host: one stream sync in every layer of a prefill
    (18 at the 2b shapes), each leaving the card idle while the host launches the next layer's ops.
    Given here, fla computes none."""

    cu_seqlens: torch.Tensor        # [G + 1] int64 on the device: 0, L, 2L, .. G L
    chunk_indices: torch.Tensor     # [NT, 2] int64: (sequence, chunk within it) of every chunk, in order


# G sequences of equal length as fla's plain batch of G (no `cu_seqlens`): what a captured pass
# gives (model/static_batch.py), whose G and L are fixed, so fla's per-batch-size autotuning runs
# at capture, and no tensor derived from `cu_seqlens` is cached by fla for a graph to replay
PLAIN_BATCH = VarlenPacking(cu_seqlens=None, chunk_indices=None)


def varlen_packing(num_seqs: int, seq_len: int, device: torch.device,
                   chunk_tokens: int = FLA_CHUNK_TOKENS) -> VarlenPacking:
    """The packing of `num_seqs` sequences of `seq_len` tokens (fla's `prepare_chunk_indices`
    layout), computed on the host and copied without a sync (`device_tensor`)."""
    chunks = -(-seq_len // chunk_tokens)
    both = device_tensor([[s, c] for s in range(num_seqs) for c in range(chunks)], device)
    return VarlenPacking(cu_seqlens=device_tensor(list(range(0, (num_seqs + 1) * seq_len, seq_len)), device),
                         chunk_indices=both.view(num_seqs * chunks, 2))


def fla_chunk_inputs(q, k, v, g, beta, state, packing: VarlenPacking | None = None) -> dict:
    """The keyword arguments of fla's `chunk_gated_delta_rule` for G sequences of equal length L
    ([G, L, ...] each): one packed batch of G * L tokens with `cu_seqlens` and `chunk_indices`
    (varlen; `packing`, built here when not given), q and k l2-normalised here
    (`use_qk_l2norm_in_kernel` off). One sequence (G = 1) is batch 1 of L tokens with no
    `cu_seqlens` (a `packing` given is not used): fla then derives nothing from one (its chunk
    offsets are cached by the identity of `cu_seqlens`, and a CUDA graph of the pass would read
    a cached tensor it does not own). `packing` PLAIN_BATCH: G sequences as fla's batch of G, no
    `cu_seqlens` either (a captured pass of several prompts).

    NOTE: whatever G and L a prefill step brings, fla's kernels see batch 1 and no shape-keyed
    autotune: its cumsum kernel takes the batch size as a compile-time constant and autotunes per
    batch size, and its l2norm kernel autotunes (25 configurations, compiled) per 2048 rows of
    q / k (`NB`); both ran the first time a prefill step brought a new batch size or token
    count, on the serving path (hundreds of ms, in the middle of a measured wave)."""
    G, L = q.shape[:2]
    if packing is PLAIN_BATCH:
        return {"q": l2norm_float32(q), "k": l2norm_float32(k), "v": v, "g": g, "beta": beta, "initial_state": state,
                "use_qk_l2norm_in_kernel": False}
    packed = {name: x.reshape(1, G * L, *x.shape[2:])
              for name, x in (("q", l2norm_float32(q)), ("k", l2norm_float32(k)), ("v", v), ("g", g), ("beta", beta))}
    if G == 1:
        return {**packed, "initial_state": state, "use_qk_l2norm_in_kernel": False}
    if packing is None:
        packing = varlen_packing(G, L, q.device)
    return {**packed, "initial_state": state, "cu_seqlens": packing.cu_seqlens,
            "chunk_indices": packing.chunk_indices, "use_qk_l2norm_in_kernel": False}


def warm_varlen_chunk(num_k_heads: int, num_v_heads: int, head_k_dim: int, head_v_dim: int,
                      dtype: torch.dtype, device: torch.device) -> bool:
    """fla's chunked rule once on a varlen batch of two sequences of FLA_CHUNK_TOKENS tokens at
    these head shapes (zero inputs, a throwaway state), so that its varlen kernels are compiled and
    autotuned now; True when it ran (half precision: float32 prefills take the recurrent kernel).

    NOTE: why: the captured prefill passes give fla a plain batch (`PLAIN_BATCH`), and the eager
    path packs several sequences as varlen, whose kernels are other compiled variants, each
    autotuned on its first call. Once the graphs serve every prompt step a rung brings, that first
    call comes with the first eager step of several prompt chunks: on one H200 a c = 32 wave whose
    arrivals put a later chunk beside three new prompts stalled 46 s there."""
    if dtype not in (torch.bfloat16, torch.float16):
        return False
    G, L = 2, FLA_CHUNK_TOKENS
    q = torch.zeros(G, L, num_k_heads, head_k_dim, dtype=dtype, device=device)
    v = torch.zeros(G, L, num_v_heads, head_v_dim, dtype=dtype, device=device)
    g = torch.zeros(G, L, num_v_heads, dtype=torch.float32, device=device)
    state = torch.zeros(G, num_v_heads, head_k_dim, head_v_dim, dtype=torch.float32, device=device)
    fla_gated_delta_rule(q, q.clone(), v, g, g.to(dtype), state, False, varlen_packing(G, L, device))
    return True


def fla_gated_delta_rule(q, k, v, g, beta, ssm_state, save_all_states: bool, packing: VarlenPacking | None = None):
    """fla-core kernels (fla maps value head h to key head h // (Hv / Hk), as repeat_interleave).
    NOTE: g and beta go by keyword: fused_recurrent's fourth and fifth parameters are g and gk.

    The chunked kernel runs half-precision prefills of >= CHUNK_MIN_TOKENS (`fla_chunk_inputs`:
    one packed sequence list, `packing` if the pass built it, q and k normalised here); the fused
    recurrent kernel runs the rest: decode, float32 (the chunked kernel's dots run in TF32, the recurrent one is IEEE float32
    throughout) and snapshots, one call per position.
    """
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_chunk
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fla_recurrent

    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    g, beta = g.float().contiguous(), beta.contiguous()
    state = ssm_state.float().contiguous()
    seq_len = q.shape[1]
    if not save_all_states:
        if q.dtype in (torch.bfloat16, torch.float16) and seq_len >= CHUNK_MIN_TOKENS:
            o, state = fla_chunk(**fla_chunk_inputs(q, k, v, g, beta, state, packing), output_final_state=True)
            return o.reshape(q.shape[0], seq_len, *o.shape[2:]), state
        return fla_recurrent(q, k, v, g=g, beta=beta, initial_state=state, output_final_state=True,
                             use_qk_l2norm_in_kernel=True)
    outs, states = [], []
    for t in range(seq_len):
        sl = slice(t, t + 1)
        o, state = fla_recurrent(q[:, sl], k[:, sl], v[:, sl], g=g[:, sl], beta=beta[:, sl],
                                 initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True)
        outs.append(o)
        states.append(state)
    return torch.cat(outs, dim=1), torch.stack(states, dim=1)


def gated_delta_rule(q, k, v, g, beta, ssm_state, save_all_states: bool, backend: str,
                     packing: VarlenPacking | None = None):
    """Dispatch on `backend` (BACKENDS): "torch" (reference, any device) or fla-core (CUDA, which
    takes the pass's `packing` of a chunked call, or builds it)."""
    if backend in ("fla", "fla_per_position"):
        return fla_gated_delta_rule(q, k, v, g, beta, ssm_state, save_all_states, packing)
    if backend != "torch":
        raise ValueError(f"gated delta rule backend: unknown {backend!r} (known: {', '.join(BACKENDS)})")
    if save_all_states:
        return recurrent_gated_delta_rule(q, k, v, g, beta, ssm_state, True)
    return chunk_gated_delta_rule(q, k, v, g, beta, ssm_state)
