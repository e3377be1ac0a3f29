"""One Triton kernel for the causal conv1d of a verification pass, conv states written in place.

The torch path of a snapshotting pass gathers each sequence's conv state from its pool slot,
concatenates it with the pass's inputs, runs a depthwise conv1d, SiLU, three layout copies,
unfolds every position's window and scatters the saved windows back into the pool: about a
dozen launches and several copies of the [N, L, C] input per Gated-DeltaNet layer. This kernel
does it in one pass over the input, kernel width 4 (Qwen3.5's `linear_conv_kernel_dim`):

    grid: one program per (sequence n, BC channels)
    s0, s1, s2 <- 0 if fresh[n] else conv_pool[src[n], c, 0..2]      # the last 3 inputs
    for t in 0 .. L-1:
        x_t <- x[n, t, c]
        y <- w[c, 0] s0 + w[c, 1] s1 + w[c, 2] s2 + w[c, 3] x_t        # float32
        out[n, t, c] <- y * sigmoid(y)
        s0, s1, s2 <- s1, s2, x_t                                      # the state after token t
        if save[n, t]: conv_pool[dst[n, t], c, 0..2] <- s0, s1, s2

The state is read into registers before any store, so a destination equal to the source slot
is safe; programs own disjoint channels. Padded sequences of a captured batch read and write
the null block only. Same function as `gated_delta_net.causal_conv1d` + the layer's `_save`
(`tests/engine_under_test/model/test_gpu_kernels.py` compares them). Imported lazily: needs Triton.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

KERNEL_WIDTH = 4


@triton.jit
def _conv_snapshot_kernel(x, stride_xn, stride_xt, w, out, conv_pool, stride_block, stride_chan, stride_row,
                          src_slots, fresh, dst_slots, save, keep_x, C, T, BC: tl.constexpr, KEEP: tl.constexpr):
    i_n = tl.program_id(0).to(tl.int64)
    o_c = tl.program_id(1) * BC + tl.arange(0, BC)
    mask = o_c < C
    o_r = tl.arange(0, 4)
    src = tl.load(src_slots + i_n).to(tl.int64)
    keep = mask & (tl.load(fresh + i_n) == 0)
    base = conv_pool + src * stride_block + o_c * stride_chan
    s0 = tl.load(base, mask=keep, other=0).to(tl.float32)
    s1 = tl.load(base + stride_row, mask=keep, other=0).to(tl.float32)
    s2 = tl.load(base + 2 * stride_row, mask=keep, other=0).to(tl.float32)
    w0 = tl.load(w + o_c * 4, mask=mask, other=0).to(tl.float32)
    w1 = tl.load(w + o_c * 4 + 1, mask=mask, other=0).to(tl.float32)
    w2 = tl.load(w + o_c * 4 + 2, mask=mask, other=0).to(tl.float32)
    w3 = tl.load(w + o_c * 4 + 3, mask=mask, other=0).to(tl.float32)
    for t in range(0, T):
        x_raw = tl.load(x + i_n * stride_xn + t * stride_xt + o_c, mask=mask, other=0)
        if KEEP:        # the input as loaded, for conv_commit: no state is written here
            tl.store(keep_x + (i_n * T + t) * C + o_c, x_raw, mask=mask)
        x_t = x_raw.to(tl.float32)
        y = w0 * s0 + w1 * s1 + w2 * s2 + w3 * x_t
        y = y * tl.sigmoid(y)
        tl.store(out + (i_n * T + t) * C + o_c, y.to(out.dtype.element_ty), mask=mask)
        s0, s1, s2 = s1, s2, x_t
        row = i_n * T + t
        if not KEEP and tl.load(save + row) != 0:
            # one [BC, 4] tile (3 rows used): each channel's state is written as one short run
            dst = tl.load(dst_slots + row).to(tl.int64)
            tile = tl.where(o_r[None, :] == 0, s0[:, None], tl.where(o_r[None, :] == 1, s1[:, None], s2[:, None]))
            d = conv_pool + dst * stride_block + o_c[:, None] * stride_chan + o_r[None, :] * stride_row
            tl.store(d, tile.to(conv_pool.dtype.element_ty), mask=mask[:, None] & (o_r[None, :] < 3))


def conv_snapshots(x: torch.Tensor, weight: torch.Tensor, conv_pool: torch.Tensor, src_slots: torch.Tensor,
                   fresh: torch.Tensor, dst_slots: torch.Tensor, save: torch.Tensor,
                   keep_x: torch.Tensor | None = None) -> torch.Tensor:
    """x [N, L, C] (channels contiguous, any row strides); weight [C, 4]; conv_pool the pool's conv
    rows [num_blocks, C, >= 3] (rows 0..2 are the state); src_slots, fresh [N]; dst_slots, save
    [N, L]. Returns SiLU(conv) [N, L, C] contiguous in x's dtype; writes the saved states in place.
    With `keep_x` ([N, L, C] contiguous, x's dtype: a deferred pass, model/deferred_states.py) no
    state is written: the inputs go into keep_x, and `conv_commit` writes the accepted state."""
    N, L, C = x.shape
    if weight.shape != (C, KERNEL_WIDTH):
        raise ValueError(f"conv_snapshots: weight must be [{C}, {KERNEL_WIDTH}], got {tuple(weight.shape)}")
    if x.stride(2) != 1 or conv_pool.shape[1] != C or conv_pool.shape[2] < KERNEL_WIDTH - 1:
        raise ValueError(f"conv_snapshots: x needs contiguous channels and the conv pool [blocks, {C}, >= 3]; "
                         f"got x strides {x.stride()}, pool {tuple(conv_pool.shape)}")
    if keep_x is not None and (tuple(keep_x.shape) != (N, L, C) or keep_x.dtype != x.dtype
                               or not keep_x.is_contiguous()):
        raise ValueError(f"conv_snapshots: keep_x must be contiguous {(N, L, C)} {x.dtype}, got "
                         f"{tuple(keep_x.shape)} {keep_x.dtype}")
    out = torch.empty(N, L, C, dtype=x.dtype, device=x.device)
    BC = 128                 # one channel per thread, 48 programs per sequence at C = 6144
    _conv_snapshot_kernel[(N, triton.cdiv(C, BC))](
        x, x.stride(0), x.stride(1), weight.contiguous(), out, conv_pool,
        conv_pool.stride(0), conv_pool.stride(1), conv_pool.stride(2),
        src_slots.to(torch.int64).contiguous(), fresh.to(torch.int32).contiguous(),
        dst_slots.to(torch.int64).contiguous(), save.to(torch.int32).contiguous(),
        out if keep_x is None else keep_x, C, L, BC=BC, KEEP=keep_x is not None, num_warps=4)
    return out


@triton.jit
def _window_entry(base, stride_row, keep_x, row0, C, o_c, mask, keep, idx):
    """Entry idx of the window [s0, s1, s2, x_0 ..]: a state row of the source slot, or a kept input."""
    from_state = tl.load(base + tl.minimum(idx, 2) * stride_row, mask=keep & (idx < 3), other=0).to(tl.float32)
    from_keep = tl.load(keep_x + (row0 + tl.maximum(idx - 3, 0)) * C + o_c, mask=mask & (idx >= 3),
                        other=0).to(tl.float32)
    return tl.where(idx < 3, from_state, from_keep)


@triton.jit
def _conv_commit_kernel(keep_x, conv_pool, stride_block, stride_chan, stride_row, src_slots, fresh, dst_slots,
                        accepted, C, T, BC: tl.constexpr):
    i_n = tl.program_id(0).to(tl.int64)
    o_c = tl.program_id(1) * BC + tl.arange(0, BC)
    mask = o_c < C
    src = tl.load(src_slots + i_n).to(tl.int64)
    keep = mask & (tl.load(fresh + i_n) == 0)
    m = tl.minimum(tl.maximum(tl.load(accepted + i_n).to(tl.int32), 0), T - 1)
    base = conv_pool + src * stride_block + o_c * stride_chan
    dst = tl.load(dst_slots + i_n * T + m).to(tl.int64)
    out = conv_pool + dst * stride_block + o_c * stride_chan
    # the state after position m is entries m + 1 .. m + 3 of the window [s0, s1, s2, x_0 .. x_{T-1}]
    row0 = i_n * T
    v0 = _window_entry(base, stride_row, keep_x, row0, C, o_c, mask, keep, m + 1)
    v1 = _window_entry(base, stride_row, keep_x, row0, C, o_c, mask, keep, m + 2)
    v2 = _window_entry(base, stride_row, keep_x, row0, C, o_c, mask, keep, m + 3)
    tl.store(out, v0.to(conv_pool.dtype.element_ty), mask=mask)
    tl.store(out + stride_row, v1.to(conv_pool.dtype.element_ty), mask=mask)
    tl.store(out + 2 * stride_row, v2.to(conv_pool.dtype.element_ty), mask=mask)


def conv_commit(keep_x: torch.Tensor, conv_pool: torch.Tensor, src_slots: torch.Tensor, fresh: torch.Tensor,
                dst_slots: torch.Tensor, accepted: torch.Tensor) -> None:
    """The conv state after position accepted[n] of a deferred pass (`conv_snapshots(keep_x=...)`)
    into rows 0..2 of pool block dst_slots[n, accepted[n]]: the last three of the initial state's
    rows and the kept inputs through that position, as the snapshot kernel would have written
    them (the same values). keep_x [N, L, C]; src_slots, fresh, accepted [N]; dst_slots [N, L]."""
    N, L, C = keep_x.shape
    BC = 128
    _conv_commit_kernel[(N, triton.cdiv(C, BC))](
        keep_x, conv_pool, conv_pool.stride(0), conv_pool.stride(1), conv_pool.stride(2),
        src_slots.to(torch.int64).contiguous(), fresh.to(torch.int32).contiguous(),
        dst_slots.to(torch.int64).contiguous(), accepted.to(torch.int64).contiguous(), C, L, BC=BC, num_warps=4)
