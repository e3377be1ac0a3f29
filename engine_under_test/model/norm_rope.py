"""An attention layer's per-head q / k norm, rotary embedding and K/V write into the pool, as ONE
Triton kernel on CUDA instead of ~16 small launches (two norms, six elementwise ops per rope,
two scatters), with the eager modules' rounding points.

    norm_rope_write(q, k, v, q_norm, k_norm, rope, cos_sin, k_cache, v_cache, slots) -> q' | None
        q' = rope(q_norm(q))                       [T, H, D], contiguous; None when q is None
        k_cache[blocks, rows] = rope(k_norm(k))    (the pool's rows of this pass's tokens)
        v_cache[blocks, rows] = v
    write_kv(k_cache, v_cache, slots, k, v)        the K/V store alone (the torch reference)

q [T, H, D], k and v [T, Hkv, D] may be column views of one fused projection (rows strided, each
head's D elements contiguous); `slots` is the ([T] block, [T] row) pair of every token (the
pool's block views are strided, one page per block). `q` None writes the K/V only (the DFlash
drafter's context). `rope` is a `rope.RotaryEmbedding` over the first rotary_dim elements of a
head (neox layout: element i pairs with i +- rotary_dim / 2), `cos_sin` its tables [T, rotary_dim]
already in the activations' dtype.

Rounding, as the modules round: the norm's output in the activations' dtype (norm.py), then
x * cos and rotate_half(x) * sin each rounded, then their sum rounded. One program per (token,
head) of q's H heads then k's Hkv heads; a program reads its head's row twice, at the element
and at its rope partner, so the pair lives in one thread without a shuffle. Off CUDA (or without
Triton) the modules' torch code runs, so the CPU reference path is unchanged.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:          # the CPU image: the torch path only
    triton = None


def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, slots: tuple[torch.Tensor, torch.Tensor],
             k: torch.Tensor, v: torch.Tensor) -> None:
    """Store k, v [T, Hkv, D] at pool (block, row) pairs `slots` ([T], [T]); the pool's block
    views are strided (one page per block), so rows are addressed by block and offset."""
    blocks, rows = slots
    k_cache[blocks, rows] = k.to(k_cache.dtype)
    v_cache[blocks, rows] = v.to(v_cache.dtype)


def _use_kernel(*tensors: torch.Tensor) -> bool:
    return triton is not None and all(t.is_cuda and t.stride(-1) == 1 for t in tensors)


if triton is not None:
    @triton.jit
    def _normed_roped(src, w, cos_row, sin_row, d, ok, partner, rot_ok, D, half, eps,
                      ZERO_CENTERED: tl.constexpr):
        """One head's row: norm (rounded to the row's dtype), then rope on the first 2 * half."""
        x = tl.load(src + d, mask=ok, other=0.0)
        dt = x.dtype
        xf = x.to(tl.float32)
        xp = tl.load(src + partner, mask=rot_ok, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(xf * xf, 0) / D + eps)
        wf = tl.load(w + d, mask=ok, other=0.0).to(tl.float32)
        wp = tl.load(w + partner, mask=rot_ok, other=0.0).to(tl.float32)
        if ZERO_CENTERED:
            y = (xf * rstd * (1.0 + wf)).to(dt).to(tl.float32)
            yp = (xp * rstd * (1.0 + wp)).to(dt).to(tl.float32)
        else:
            y = (wf * (xf * rstd).to(dt).to(tl.float32)).to(dt).to(tl.float32)
            yp = (wp * (xp * rstd).to(dt).to(tl.float32)).to(dt).to(tl.float32)
        c = tl.load(cos_row + d, mask=rot_ok, other=0.0).to(tl.float32)
        s = tl.load(sin_row + d, mask=rot_ok, other=0.0).to(tl.float32)
        rotated = tl.where(d < half, -yp, yp)
        roped = (y * c).to(dt).to(tl.float32) + (rotated * s).to(dt).to(tl.float32)
        return tl.where(rot_ok, roped, y).to(dt)

    @triton.jit
    def _norm_rope_kernel(q, k, v, wq, wk, cos, sin, q_out, k_cache, v_cache, blocks, rows, num_q_heads,
                          stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_cs,
                          stride_kcb, stride_kcr, stride_kch, stride_vcb, stride_vcr, stride_vch,
                          D, half, eps_q, eps_k, ZERO_CENTERED: tl.constexpr, BLOCK_D: tl.constexpr):
        t = tl.program_id(0).to(tl.int64)
        h = tl.program_id(1)
        d = tl.arange(0, BLOCK_D)
        ok = d < D
        rot_ok = d < 2 * half
        partner = tl.where(d < half, d + half, d - half)
        cos_row, sin_row = cos + t * stride_cs, sin + t * stride_cs
        if h < num_q_heads:
            y = _normed_roped(q + t * stride_qt + h * stride_qh, wq, cos_row, sin_row, d, ok, partner, rot_ok,
                              D, half, eps_q, ZERO_CENTERED)
            tl.store(q_out + (t * num_q_heads + h) * D + d, y, mask=ok)
        else:
            hk = h - num_q_heads
            y = _normed_roped(k + t * stride_kt + hk * stride_kh, wk, cos_row, sin_row, d, ok, partner, rot_ok,
                              D, half, eps_k, ZERO_CENTERED)
            blk = tl.load(blocks + t).to(tl.int64)
            row = tl.load(rows + t).to(tl.int64)
            tl.store(k_cache + blk * stride_kcb + row * stride_kcr + hk * stride_kch + d,
                     y.to(k_cache.dtype.element_ty), mask=ok)
            vv = tl.load(v + t * stride_vt + hk * stride_vh + d, mask=ok, other=0.0)
            tl.store(v_cache + blk * stride_vcb + row * stride_vcr + hk * stride_vch + d,
                     vv.to(v_cache.dtype.element_ty), mask=ok)


def _zero_centered(norm) -> bool:
    from engine_under_test.model.norm import ZeroCenteredRMSNorm

    return isinstance(norm, ZeroCenteredRMSNorm)


def norm_rope_write(q: torch.Tensor | None, k: torch.Tensor, v: torch.Tensor, q_norm, k_norm, rope,
                    cos_sin: tuple[torch.Tensor, torch.Tensor], k_cache: torch.Tensor, v_cache: torch.Tensor,
                    slots: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor | None:
    cos, sin = cos_sin
    views = [k, v, k_cache, v_cache, cos, sin] + ([q] if q is not None else [])
    same_norm = q is None or (_zero_centered(q_norm) == _zero_centered(k_norm) and q.dtype == k.dtype)
    if not (_use_kernel(*views) and same_norm and cos.is_contiguous() and sin.is_contiguous()
            and k.shape[0] > 0):
        if q is not None:
            q = rope.apply(q_norm(q), cos, sin)
        write_kv(k_cache, v_cache, slots, rope.apply(k_norm(k), cos, sin), v)
        return q
    T, Hkv, D = k.shape
    H = q.shape[1] if q is not None else 0
    q_src = q if q is not None else k
    q_out = torch.empty(T, max(H, 1), D, dtype=q_src.dtype, device=k.device)
    blocks, rows = slots
    _norm_rope_kernel[(T, H + Hkv)](
        q_src, k, v, (q_norm if q is not None else k_norm).weight, k_norm.weight, cos, sin, q_out,
        k_cache, v_cache, blocks, rows, H,
        q_src.stride(0), q_src.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), cos.stride(0),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), v_cache.stride(0), v_cache.stride(1),
        v_cache.stride(2), D, rope.rotary_dim // 2, (q_norm if q is not None else k_norm).eps, k_norm.eps,
        ZERO_CENTERED=_zero_centered(k_norm), BLOCK_D=triton.next_power_of_2(D), num_warps=1 if D <= 128 else 2)
    return q_out if q is not None else None
