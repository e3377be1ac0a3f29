"""Fused RMSNorm chains on CUDA: one Triton kernel per norm instead of ~10 elementwise launches
(what a captured decode step is made of), with the eager modules' exact rounding points.

    add_rms_norm(h, x, norm)   h' = h + x (in h's dtype), y = norm(h')  -> (h', y)
    rms_norm(x, norm)          y = norm(x)
    gated_rms_norm(x, gate, norm)  GatedRMSNorm: weight * norm(x) * silu(gate)
    l2_norm(x, eps)            x / sqrt(|x|^2 + eps) per row of the last axis (q and k before fla's
                               chunked rule: `gated_delta_net.l2norm_float32`, whose torch ops are
                               a float32 reduce, a float32 product and a cast: three passes)

`norm` is a `norm.ZeroCenteredRMSNorm` ((1 + w) * x / rms(x) in float32, then x's dtype) or
a `norm.RMSNorm` (x / rms(x) rounded to x's dtype, times w). One program per row; the row is
reduced in float32. `rms_norm` reads a [T, heads, dim] x at its two row strides, so per-head
columns of a fused projection (q_norm, k_norm) are not copied first; `gated_rms_norm` reads its
gate the same way (Gated-DeltaNet's z, a column view of the fused input projection). Off CUDA
(or without Triton) each is the modules' own torch code, so the CPU reference path is unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

try:
    import triton
    import triton.language as tl
except ImportError:          # the CPU image: the torch path only
    triton = None


def _use_kernel(x: torch.Tensor) -> bool:
    return triton is not None and x.is_cuda and x.stride(-1) == 1


if triton is not None:
    @triton.jit
    def _norm_kernel(x, res, w, gate, out, res_out, n, inner, stride_x_outer, stride_x, stride_res, gate_inner,
                     stride_gate_outer, stride_gate, stride_out, eps,
                     HAS_RES: tl.constexpr, ZERO_CENTERED: tl.constexpr, GATED: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        ok = cols < n
        v = tl.load(x + (row // inner) * stride_x_outer + (row % inner) * stride_x + cols, mask=ok, other=0.0)
        if HAS_RES:
            v = (v.to(tl.float32) + tl.load(res + row * stride_res + cols, mask=ok, other=0.0).to(tl.float32)).to(v.dtype)
            tl.store(res_out + row * stride_out + cols, v, mask=ok)
        vf = v.to(tl.float32)
        normed = vf * tl.rsqrt(tl.sum(vf * vf, 0) / n + eps)
        wf = tl.load(w + cols, mask=ok, other=0.0).to(tl.float32)
        if ZERO_CENTERED:
            y = normed * (1.0 + wf)
        else:
            y = wf * normed.to(v.dtype).to(tl.float32)
        if GATED:
            y = y.to(v.dtype).to(tl.float32)
            gv = tl.load(gate + (row // gate_inner) * stride_gate_outer + (row % gate_inner) * stride_gate + cols,
                         mask=ok, other=0.0).to(tl.float32)
            y = y * (gv / (1.0 + tl.exp(-gv)))
        tl.store(out + row * stride_out + cols, y.to(out.dtype.element_ty), mask=ok)


if triton is not None:
    @triton.jit
    def _l2_norm_kernel(x, out, rows, n, eps, ROWS: tl.constexpr, BLOCK: tl.constexpr):
        r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
        cols = tl.arange(0, BLOCK)
        ok = (r < rows)[:, None] & (cols < n)[None, :]
        offs = r[:, None] * n + cols[None, :]
        v = tl.load(x + offs, mask=ok, other=0.0).to(tl.float32)
        norm = tl.sqrt(tl.sum(v * v, 1))                 # torch: vector_norm in float32, then its square
        tl.store(out + offs, (v * tl.rsqrt(norm * norm + eps)[:, None]).to(out.dtype.element_ty), mask=ok)


L2_ROWS = 16                 # rows of one program: 8,192 programs for 16 prompts x 512 tokens x 16 heads


def l2_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., n] -> x / sqrt(sum(x^2) + eps) over the last axis, reduced and scaled in float32, in x's
    dtype (`gated_delta_net.l2norm_float32`'s rounding points). One kernel for a contiguous x on CUDA;
    else the torch ops."""
    if not (_use_kernel(x) and x.is_contiguous()):
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True, dtype=torch.float32)
        return torch.mul(x, torch.rsqrt(norm.square_() + eps)).to(x.dtype)
    n = x.shape[-1]
    rows = x.numel() // n if n else 0
    out = torch.empty_like(x)
    if rows:
        _l2_norm_kernel[(triton.cdiv(rows, L2_ROWS),)](x, out, rows, n, eps, ROWS=L2_ROWS,
                                                       BLOCK=triton.next_power_of_2(n), num_warps=4)
    return out


def _launch(x: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool,
            res2: torch.Tensor | None = None, gate2: torch.Tensor | None = None):
    """x [rows, n], or [outer, inner, n] whose two row strides need not merge (per-head columns of
    a wider projection: row r = (r // inner, r % inner)); res2 [rows, n]; gate2 [rows, n] or
    [outer', inner', n] read the same way (the gate a column view too). Every row's elements
    contiguous. Returns (out, res_out) [rows, n], contiguous."""
    x3 = x if x.dim() == 3 else x.unsqueeze(0)
    outer, inner, n = x3.shape
    out = torch.empty(outer * inner, n, dtype=x.dtype, device=x.device)
    res_out = torch.empty_like(out) if res2 is not None else out
    block = triton.next_power_of_2(n)
    g3 = None if gate2 is None else (gate2 if gate2.dim() == 3 else gate2.unsqueeze(0))
    _norm_kernel[(outer * inner,)](x3, res2 if res2 is not None else x3, weight, g3 if g3 is not None else x3,
                                   out, res_out, n, inner, x3.stride(0), x3.stride(1),
                                   res2.stride(0) if res2 is not None else 0,
                                   g3.shape[1] if g3 is not None else 1, g3.stride(0) if g3 is not None else 0,
                                   g3.stride(1) if g3 is not None else 0, out.stride(0), eps,
                                   HAS_RES=res2 is not None, ZERO_CENTERED=zero_centered, GATED=gate2 is not None,
                                   BLOCK=block, num_warps=4 if block <= 2048 else 8)
    return out, res_out


def _zero_centered(norm) -> bool:
    """`x / rms(x) * (1 + weight)` (the norm says so: `norm.ZeroCenteredRMSNorm.zero_centered`)."""
    return bool(getattr(norm, "zero_centered", False))


def rms_norm(x: torch.Tensor, norm) -> torch.Tensor:
    if not _use_kernel(x):
        return norm.torch_forward(x)
    shape = x.shape
    # [.., heads, dim]: heads of a fused projection's column view are read in place (no copy)
    rows = x.reshape(-1, shape[-2], shape[-1]) if x.dim() >= 3 else x.reshape(-1, shape[-1])
    out, _ = _launch(rows, norm.weight, norm.eps, _zero_centered(norm))
    return out.view(shape)


def add_rms_norm(h: torch.Tensor, x: torch.Tensor, norm) -> tuple[torch.Tensor, torch.Tensor]:
    if not (_use_kernel(h) and x.is_contiguous() and x.dtype == h.dtype):
        h = h + x
        return h, norm.torch_forward(h)
    shape = h.shape
    out, res = _launch(h.reshape(-1, shape[-1]), norm.weight, norm.eps, _zero_centered(norm), res2=x.reshape(-1, shape[-1]))
    return res.view(shape), out.view(shape)


def gated_rms_norm(x: torch.Tensor, gate: torch.Tensor, norm) -> torch.Tensor:
    if not (_use_kernel(x) and gate.stride(-1) == 1 and x.is_contiguous()):
        dtype = x.dtype
        out = norm.weight * norm.normalize(x).to(dtype)
        return (out * F.silu(gate.float())).to(dtype)
    shape = x.shape
    # [T, heads, dim]: heads of a fused projection's column view are read in place (no copy)
    gate_rows = gate.reshape(-1, gate.shape[-2], gate.shape[-1]) if gate.dim() >= 3 else gate.reshape(-1, shape[-1])
    out, _ = _launch(x.reshape(-1, shape[-1]), norm.weight, norm.eps, False, gate2=gate_rows)
    return out.view(shape)
