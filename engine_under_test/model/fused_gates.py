"""The two gated products of a layer as one Triton kernel each on CUDA, with the eager ops'
rounding points (each op's result in the activations' dtype, computed in float32):

    silu_mul(gate, up)    SwiGLU: silu(gate) * up, written into gate's memory; returns gate
    sigmoid_mul(o, gate)  the attention output gate: o * sigmoid(gate) -> a new [T, H, D]

`gate` and `up` [T, n] may be column views of one fused projection (rows strided, columns
contiguous); for sigmoid_mul, o [T, H, D] is contiguous and gate [T, H, D] may have strided rows
and heads (the per-head second half of q_proj's output). Eagerly these are two (silu_mul) and
three (sigmoid_mul: a copy of the strided gate) launches. Off CUDA (or without Triton) the torch
ops run, so the CPU reference path is unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

try:
    import triton
    import triton.language as tl
except ImportError:          # the CPU image: the torch path only
    triton = None

BLOCK_COLS = 1024


def _use_kernel(*tensors: torch.Tensor) -> bool:
    return triton is not None and all(t.is_cuda and t.stride(-1) == 1 for t in tensors)


if triton is not None:
    @triton.jit
    def _silu_mul_kernel(gate, up, n, stride_g, stride_u, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ok = cols < n
        g = tl.load(gate + row * stride_g + cols, mask=ok, other=0.0)
        dt = g.dtype
        gf = g.to(tl.float32)
        silu = (gf / (1.0 + tl.exp(-gf))).to(dt).to(tl.float32)
        u = tl.load(up + row * stride_u + cols, mask=ok, other=0.0).to(tl.float32)
        tl.store(gate + row * stride_g + cols, (silu * u).to(dt), mask=ok)

    @triton.jit
    def _sigmoid_mul_kernel(o, gate, out, D, num_heads, stride_ot, stride_oh, stride_gt, stride_gh,
                            BLOCK_D: tl.constexpr):
        t = tl.program_id(0).to(tl.int64)
        h = tl.program_id(1)
        d = tl.arange(0, BLOCK_D)
        ok = d < D
        x = tl.load(o + t * stride_ot + h * stride_oh + d, mask=ok, other=0.0)
        dt = x.dtype
        g = tl.load(gate + t * stride_gt + h * stride_gh + d, mask=ok, other=0.0).to(tl.float32)
        sig = (1.0 / (1.0 + tl.exp(-g))).to(dt).to(tl.float32)
        tl.store(out + (t * num_heads + h) * D + d, (x.to(tl.float32) * sig).to(dt), mask=ok)


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """gate, up [T, n] -> gate, holding silu(gate) * up."""
    if not (_use_kernel(gate, up) and gate.dim() == 2 and gate.shape == up.shape and gate.dtype == up.dtype):
        return F.silu(gate, inplace=True).mul_(up)
    T, n = gate.shape
    if T > 0:
        _silu_mul_kernel[(T, triton.cdiv(n, BLOCK_COLS))](gate, up, n, gate.stride(0), up.stride(0),
                                                          BLOCK=BLOCK_COLS, num_warps=4)
    return gate


def sigmoid_mul(o: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """o, gate [T, H, D] -> o * sigmoid(gate) [T, H, D], contiguous."""
    if not (_use_kernel(o, gate) and o.dim() == 3 and o.shape == gate.shape and o.dtype == gate.dtype):
        T = o.shape[0]
        return (o.reshape(T, -1) * torch.sigmoid(gate.reshape(T, -1))).view(o.shape)
    T, H, D = o.shape
    out = torch.empty(T, H, D, dtype=o.dtype, device=o.device)
    if T > 0:
        _sigmoid_mul_kernel[(T, H)](o, gate, out, D, H, o.stride(0), o.stride(1), gate.stride(0), gate.stride(1),
                                    BLOCK_D=triton.next_power_of_2(D), num_warps=1 if D <= 256 else 2)
    return out
