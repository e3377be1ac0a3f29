"""Two Triton kernels for the causal conv1d of a prompt pass, written straight into q, k and v.

The torch path of a pass that saves one state per sequence (prompt chunks) gathers each
sequence's conv state from its pool slot, concatenates it with the pass's inputs, runs a
depthwise conv1d, SiLU and three layout copies into q, k, v: at 16 prompts of 512 tokens
(C = 6144) about a third of a Gated-DeltaNet layer's device time. Here, kernel width 4
(Qwen3.5's `linear_conv_kernel_dim`), parallel over time:

    conv  grid: one program per (sequence n, BT positions, BC channels)
        window of sequence n: [s0, s1, s2, x_0 .. x_{L-1}],  s_j = 0 if fresh[n] else conv_pool[src[n], c, j]
        for t in the block:                                    # window entries t .. t + 3
            y <- w[c, 0] win[t] + w[c, 1] win[t+1] + w[c, 2] win[t+2] + w[c, 3] x_t     # float32
            qkv[n, t, c] <- y * sigmoid(y)                     # into q, k or v (below)
        first time block only: state0[n, c, 0..2] <- s0, s1, s2
    save  grid: one program per (saved state i, BC channels)
        n, pos <- save_seq[i], save_pos[i]
        conv_pool[save_dst[i], c, 0..2] <- window entries pos + 1 .. pos + 3 of sequence n
                                           (from state0 and x: never from the pool)

Output layout: one flat buffer, channel c < Dq = Hk Dk to q, c < 2 Dq to k, the rest to v:

    [ q [N, L, Hk, Dk] | k [N, L, Hk, Dk] | v [N, L, Hv, Dv] ]      each contiguous

so the gated delta rule reads them with no copy. The initial state is rounded to x's dtype
before use, as the torch path does (`causal_conv1d` concatenates it with x in that dtype).

What is safe: the conv kernel only reads the pool; the save kernel, launched after it on the
same stream, reads the initial states from `state0` (the conv kernel's copy) and the inputs
from x (never a pool view), and only then writes the pool. So a destination equal to any
sequence's source slot, its own or another's, is written only after every read of that slot.
Two saves into one block (the pad sequences of a captured pass all save into the null block,
which nothing reads) race as torch's `index_copy_` does. Pad rows of a ragged group (past a
sequence's last input) get the formula's value over the repeated input; the layer masks them
(gate and step size 0). No host read, no data-dependent shape: capturable in a CUDA graph.
Same function as `gated_delta_net.causal_conv1d` + the layer's `_save`
(tests/engine_under_test/model/test_gdn_prefill_conv_kernel.py). Imported lazily: needs Triton.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

KERNEL_WIDTH = 4
BLOCK_POSITIONS = 32         # BT
BLOCK_CHANNELS = 128         # BC: 48 channel blocks at C = 6144


@triton.jit
def _prefill_conv_kernel(x, stride_xn, stride_xt, w, out, state0, conv_pool, stride_block, stride_chan, stride_row,
                         src_slots, fresh, L, C, KD, k_base, v_base, BT: tl.constexpr, BC: tl.constexpr):
    i_n = tl.program_id(0).to(tl.int64)
    i_t = tl.program_id(1)
    o_t = i_t * BT + tl.arange(0, BT)
    o_c = tl.program_id(2) * BC + tl.arange(0, BC)
    c_ok = o_c < C
    t_ok = o_t < L
    src = tl.load(src_slots + i_n).to(tl.int64)
    keep = c_ok & (o_c * 0 + tl.load(fresh + i_n) == 0)  # [BC]: channels whose state is read
    state = conv_pool + src * stride_block + o_c[None, :] * stride_chan
    acc = tl.zeros((BT, BC), dtype=tl.float32)
    for i in tl.static_range(4):
        r = o_t + (i - 3)                               # tap i reads window entry t + i: x_{t+i-3}, or s_{t+i}
        in_x = (r >= 0)[:, None]
        from_x = tl.load(x + i_n * stride_xn + r[:, None] * stride_xt + o_c[None, :],
                         mask=in_x & t_ok[:, None] & c_ok[None, :], other=0)
        from_state = tl.load(state + (r + 3)[:, None] * stride_row, mask=(r < 0)[:, None] & keep[None, :], other=0)
        win = tl.where(in_x, from_x, from_state.to(x.dtype.element_ty)).to(tl.float32)
        w_i = tl.load(w + o_c * 4 + i, mask=c_ok, other=0).to(tl.float32)
        acc += w_i[None, :] * win
    y = acc * tl.sigmoid(acc)
    # channel c -> q, k or v, each [N, L, width] contiguous in the flat buffer
    is_q = o_c < KD
    is_k = (o_c >= KD) & (o_c < 2 * KD)
    width = tl.where(o_c < 2 * KD, KD, C - 2 * KD).to(tl.int64)
    base = tl.where(is_q, 0, tl.where(is_k, k_base, v_base)).to(tl.int64)
    col = tl.where(is_q, o_c, tl.where(is_k, o_c - KD, o_c - 2 * KD))
    row = i_n * L + o_t
    dst = out + base[None, :] + row[:, None] * width[None, :] + col[None, :]
    tl.store(dst, y.to(out.dtype.element_ty), mask=t_ok[:, None] & c_ok[None, :])
    if i_t == 0:        # the initial state, for the save kernel (which must not read the pool)
        o_r = tl.arange(0, 4)
        r_ok = (o_r < 3)[None, :] & c_ok[:, None]
        s = tl.load(conv_pool + src * stride_block + o_c[:, None] * stride_chan + o_r[None, :] * stride_row,
                    mask=r_ok & keep[:, None], other=0)
        tl.store(state0 + (i_n * C + o_c[:, None]) * 3 + o_r[None, :], s.to(state0.dtype.element_ty), mask=r_ok)


@triton.jit
def _prefill_save_kernel(x, stride_xn, stride_xt, state0, conv_pool, stride_block, stride_chan, stride_row,
                         save_seq, save_pos, save_dst, C, BC: tl.constexpr):
    i_s = tl.program_id(0)
    o_c = tl.program_id(1) * BC + tl.arange(0, BC)
    c_ok = o_c < C
    n = tl.load(save_seq + i_s).to(tl.int64)
    pos = tl.load(save_pos + i_s).to(tl.int64)
    dst = tl.load(save_dst + i_s).to(tl.int64)
    o_r = tl.arange(0, 4)
    idx = pos + 1 + o_r                                 # window entries pos + 1 .. pos + 3 (row 3 unused)
    r_ok = (o_r < 3)[None, :] & c_ok[:, None]
    in_x = (idx >= 3)[None, :]
    from_state = tl.load(state0 + (n * C + o_c[:, None]) * 3 + idx[None, :], mask=r_ok & (idx < 3)[None, :], other=0)
    from_x = tl.load(x + n * stride_xn + (idx - 3)[None, :] * stride_xt + o_c[:, None], mask=r_ok & in_x, other=0)
    v = tl.where(in_x, from_x, from_state)
    d = conv_pool + dst * stride_block + o_c[:, None] * stride_chan + o_r[None, :] * stride_row
    tl.store(d, v.to(conv_pool.dtype.element_ty), mask=r_ok)


def conv_prefill(x: torch.Tensor, weight: torch.Tensor, conv_pool: torch.Tensor, src_slots: torch.Tensor,
                 fresh: torch.Tensor, save_seq: torch.Tensor, save_pos: torch.Tensor, save_dst: torch.Tensor,
                 num_k_heads: int, head_k_dim: int, num_v_heads: int,
                 head_v_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """SiLU(causal conv) of x continuing from each sequence's conv state, as (q, k, v).

    x [N, L, C] (channels contiguous, any row strides; C = 2 Hk Dk + Hv Dv); weight [C, 4];
    conv_pool the pool's conv rows [num_blocks, C, >= 3] (rows 0..2 are the state, any strides);
    src_slots [N] int64 and fresh [N] int32 (nonzero: start from zeros); save_seq, save_pos,
    save_dst [S] int64: the state after position save_pos[i] (< L) of sequence save_seq[i] goes
    into rows 0..2 of block save_dst[i]. Returns q, k [N, L, Hk, Dk] and v [N, L, Hv, Dv],
    contiguous views of one buffer in x's dtype. The pool is written in place."""
    N, L, C = x.shape
    key_dim, value_dim = num_k_heads * head_k_dim, num_v_heads * head_v_dim
    if weight.shape != (C, KERNEL_WIDTH) or C != 2 * key_dim + value_dim:
        raise ValueError(f"conv_prefill: weight must be [{C}, {KERNEL_WIDTH}] and C = 2 * {key_dim} + {value_dim}; "
                         f"got weight {tuple(weight.shape)}, C = {C}")
    if x.stride(2) != 1 or conv_pool.shape[1] != C or conv_pool.shape[2] < KERNEL_WIDTH - 1:
        raise ValueError(f"conv_prefill: x needs contiguous channels and the conv pool [blocks, {C}, >= 3]; "
                         f"got x strides {x.stride()}, pool {tuple(conv_pool.shape)}")
    flat = torch.empty(N * L * C, dtype=x.dtype, device=x.device)
    state0 = torch.empty(N, C, KERNEL_WIDTH - 1, dtype=x.dtype, device=x.device)
    k_base, v_base = N * L * key_dim, 2 * N * L * key_dim
    BT, BC = BLOCK_POSITIONS, BLOCK_CHANNELS
    pool_strides = (conv_pool.stride(0), conv_pool.stride(1), conv_pool.stride(2))
    _prefill_conv_kernel[(N, triton.cdiv(L, BT), triton.cdiv(C, BC))](
        x, x.stride(0), x.stride(1), weight.contiguous(), flat, state0, conv_pool, *pool_strides,
        src_slots, fresh, L, C, key_dim, k_base, v_base, BT=BT, BC=BC, num_warps=4)
    if save_seq.numel() > 0:                # after the conv kernel: every read of a source slot is done
        _prefill_save_kernel[(save_seq.numel(), triton.cdiv(C, BC))](
            x, x.stride(0), x.stride(1), state0, conv_pool, *pool_strides, save_seq, save_pos, save_dst, C,
            BC=BC, num_warps=4)
    q = flat[:k_base].view(N, L, num_k_heads, head_k_dim)
    k = flat[k_base:v_base].view(N, L, num_k_heads, head_k_dim)
    v = flat[v_base:].view(N, L, num_v_heads, head_v_dim)
    return q, k, v
