"""One Triton kernel for a verification pass of the gated delta rule: every position's state
goes straight into its pool slot.

A speculative step feeds 1 + s tokens per sequence and must keep the state after each of the
last 1 + s positions (one snapshot slot each, see `runtime.runner`). Calling a recurrent kernel
once per position costs 1 + s launches per layer and a stacked copy of every state. This
kernel reads the input state from its pool slot, runs the L positions in registers and writes
the state after position t into pool block `dst_slots[n, t]` where `save[n, t]` is set:

    grid: one program per (sequence n, value head, BV value rows)
    h <- 0 if fresh[n] else pool[src_slots[n], head, rows, :]       # [BV, Dk] tile, float32
    for t in 0 .. L-1:
        h <- h * exp(g_t); h <- h + k_t (beta_t (v_t - h k_t))        # q, k l2-normalised
        o_t <- h q_t * scale;  if save[n, t]: pool[dst_slots[n, t], head, rows, :] <- h

The pool's SSM view is V-first `[num_blocks, Hv, Dv, Dk]` (a strided view: one page per
block). Each program touches only its own tile, so a destination equal to the source slot is
safe. The arithmetic is fla-core's `fused_recurrent_gated_delta_rule_fwd_kernel` (MIT), in its
V-first branch, with the per-position stores added. Imported lazily: needs Triton (CUDA).

Deferred (a captured verify step, `keep=`): of the L states only the one after the accepted
prefix is ever read again, and which one is known only after verification. The pass then
writes no state; it keeps each position's k, v and gates (a few KiB a sequence and layer), and
`gdn_commit`, run once the accepted length m is on the device, replays positions 0 .. m from
the input state and writes that one state into dst_slots[n, m]. Per sequence and layer the
state traffic is 3 state sizes (read, read, write) instead of 1 + L (L = 9: 10):

    commit:  h <- pool[src_slots[n]];  for t in 0 .. m: h <- update_t(h);  pool[dst_slots[n, m]] <- h
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine_under_test.model.kept_inputs import KeptInputs

# Each program owns BLOCK_V (the commit: COMMIT_BLOCK_V) value rows of one value head's [Dv, Dk]
# state and runs NUM_WARPS warps. benchmarks/gpu_gdn_sweep.py times the choices on one H200: at 32
# sequences the verify pass is fastest at 16 rows, the commit (a state read and write) at 8.
BLOCK_V = 16
COMMIT_BLOCK_V = 8
NUM_WARPS = 1

try:
    from triton.language.extra import libdevice
except ImportError:   # older Triton
    from triton.language.extra.cuda import libdevice


@triton.jit
def _update(b_h, b_k, b_v, b_g, b_beta):
    """One position of the gated delta rule on a [BV, Dk] state tile (k already normalised)."""
    b_h *= tl.exp(b_g)
    b_v = b_beta * (b_v - tl.sum(b_h * b_k[None, :], 1))
    b_h += b_v[:, None] * b_k[None, :]
    return b_h


@triton.jit
def _gdn_snapshot_kernel(q, k, v, g, beta, o, state, src_slots, fresh, dst_slots, save,
                         keep_k, keep_v, keep_g, keep_beta,
                         scale, stride_block, T, stride_qk, stride_v, A_log, dt_bias, stride_gate,
                         H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                         BK: tl.constexpr, BV: tl.constexpr, RAW_GATES: tl.constexpr, KEEP: tl.constexpr):
    NV = tl.cdiv(V, BV)
    pid = tl.program_id(0).to(tl.int64)
    i_v, i_nh = pid % NV, pid // NV
    i_n, i_hv = i_nh // HV, i_nh % HV
    i_h = i_hv // (HV // H)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    mask_k = o_k < K
    mask_v = o_v < V
    mask_h = mask_v[:, None] & mask_k[None, :]
    tile = i_hv * (V * K) + o_v[:, None] * K + o_k[None, :]
    keeps_head = (i_v == 0) & (i_hv % (HV // H) == 0)      # one program stores a key head's k

    src = tl.load(src_slots + i_n).to(tl.int64)
    is_fresh = tl.load(fresh + i_n)
    b_h = tl.load(state + src * stride_block + tile, mask=mask_h & (is_fresh == 0), other=0).to(tl.float32)
    for t in range(0, T):
        row = i_n * T + t
        b_q = tl.load(q + row * stride_qk + i_h * K + o_k, mask=mask_k, other=0).to(tl.float32)
        b_k = tl.load(k + row * stride_qk + i_h * K + o_k, mask=mask_k, other=0)
        b_v = tl.load(v + row * stride_v + i_hv * V + o_v, mask=mask_v, other=0)
        if RAW_GATES:   # g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b), as the layer's torch ops
            b_a = tl.load(g + row * stride_gate + i_hv).to(tl.float32) + tl.load(dt_bias + i_hv).to(tl.float32)
            b_sp = tl.where(b_a > 20.0, b_a, libdevice.log1p(tl.exp(b_a)))
            b_g = -tl.exp(tl.load(A_log + i_hv).to(tl.float32)) * b_sp
            b_beta = tl.sigmoid(tl.load(beta + row * stride_gate + i_hv).to(tl.float32))
            b_beta = b_beta.to(beta.dtype.element_ty).to(tl.float32)
        else:
            b_g = tl.load(g + row * HV + i_hv).to(tl.float32)
            b_beta = tl.load(beta + row * HV + i_hv).to(tl.float32)
        if KEEP:        # the inputs the commit kernel replays, as loaded (the gates as computed)
            tl.store(keep_k + (row * H + i_h) * K + o_k, b_k, mask=mask_k & keeps_head)
            tl.store(keep_v + (row * HV + i_hv) * V + o_v, b_v, mask=mask_v)
            tl.store(keep_g + row * HV + i_hv, b_g, mask=i_v == 0)
            tl.store(keep_beta + row * HV + i_hv, b_beta, mask=i_v == 0)
        b_k = b_k.to(tl.float32)
        b_q = b_q / tl.sqrt(tl.sum(b_q * b_q) + 1e-6) * scale
        b_k = b_k / tl.sqrt(tl.sum(b_k * b_k) + 1e-6)
        b_h = _update(b_h, b_k, b_v.to(tl.float32), b_g, b_beta)
        b_o = tl.sum(b_h * b_q[None, :], 1)
        tl.store(o + (row * HV + i_hv) * V + o_v, b_o.to(o.dtype.element_ty), mask=mask_v)
        if not KEEP:
            dst = tl.load(dst_slots + row).to(tl.int64)
            flag = tl.load(save + row)
            tl.store(state + dst * stride_block + tile, b_h.to(state.dtype.element_ty), mask=mask_h & (flag != 0))


@triton.jit
def _gdn_commit_kernel(keep_k, keep_v, keep_g, keep_beta, state, src_slots, fresh, dst_slots, accepted,
                       stride_block, T, H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                       BK: tl.constexpr, BV: tl.constexpr):
    NV = tl.cdiv(V, BV)
    pid = tl.program_id(0).to(tl.int64)
    i_v, i_nh = pid % NV, pid // NV
    i_n, i_hv = i_nh // HV, i_nh % HV
    i_h = i_hv // (HV // H)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    mask_k = o_k < K
    mask_v = o_v < V
    mask_h = mask_v[:, None] & mask_k[None, :]
    tile = i_hv * (V * K) + o_v[:, None] * K + o_k[None, :]

    src = tl.load(src_slots + i_n).to(tl.int64)
    is_fresh = tl.load(fresh + i_n)
    b_h = tl.load(state + src * stride_block + tile, mask=mask_h & (is_fresh == 0), other=0).to(tl.float32)
    m = tl.minimum(tl.maximum(tl.load(accepted + i_n).to(tl.int32), 0), T - 1)
    for t in range(0, m + 1):
        row = i_n * T + t
        b_k = tl.load(keep_k + (row * H + i_h) * K + o_k, mask=mask_k, other=0).to(tl.float32)
        b_v = tl.load(keep_v + (row * HV + i_hv) * V + o_v, mask=mask_v, other=0).to(tl.float32)
        b_g = tl.load(keep_g + row * HV + i_hv)
        b_beta = tl.load(keep_beta + row * HV + i_hv)
        b_k = b_k / tl.sqrt(tl.sum(b_k * b_k) + 1e-6)
        b_h = _update(b_h, b_k, b_v, b_g, b_beta)
    dst = tl.load(dst_slots + i_n * T + m).to(tl.int64)
    tl.store(state + dst * stride_block + tile, b_h.to(state.dtype.element_ty), mask=mask_h)


def gdn_snapshots(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                  ssm_pool: torch.Tensor, src_slots: torch.Tensor, fresh: torch.Tensor,
                  dst_slots: torch.Tensor, save: torch.Tensor, out: torch.Tensor | None = None,
                  gates: tuple[torch.Tensor, torch.Tensor] | None = None,
                  keep: KeptInputs | None = None, block_v: int = BLOCK_V, num_warps: int = NUM_WARPS) -> torch.Tensor:
    """q, k [N, L, Hk, Dk], v [N, L, Hv, Dv], g, beta [N, L, Hv]; ssm_pool the pool's V-first
    view [num_blocks, Hv, Dv, Dk]; src_slots, fresh [N]; dst_slots, save [N, L]. Returns o
    [N, L, Hv, Dv] (v's dtype; into `out` when given, contiguous) and writes the saved states
    into ssm_pool in place. q, k and v may be views with any token stride (columns of one
    projection): heads and head dims must be contiguous, and q and k share their strides.

    `gates=(A_log, dt_bias)` ([Hv] each): g and beta are then the raw projections a and b
    ([N, L, Hv] views, one token stride) and the kernel computes the layer's gates itself.

    `keep` (a `KeptInputs` for N x L rows): no state is written; every position's k and v (as
    loaded) and gates (as computed) go into `keep` instead, for `gdn_commit` to write the one
    accepted state later (dst_slots and save are then unused here)."""
    N, L, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if tuple(ssm_pool.shape[1:]) != (HV, V, K) or tuple(ssm_pool.stride()[1:]) != (V * K, K, 1):
        raise ValueError(f"gdn_snapshots: the SSM pool view must be [blocks, {HV}, {V}, {K}] with contiguous "
                         f"heads, got shape {tuple(ssm_pool.shape)} strides {ssm_pool.stride()}")
    if HV % H:
        raise ValueError(f"gdn_snapshots: {HV} value heads are not a multiple of {H} key heads")
    q, k, v = (_rows(x) for x in (q, k, v))
    if (_row_stride(q), q.stride(2)) != (_row_stride(k), k.stride(2)):
        k = k.contiguous()
        q = q.contiguous()
    if gates is None:
        g, beta = g.float().contiguous(), beta.contiguous()
        A_log = dt_bias = g
        stride_gate = 0
    else:
        A_log, dt_bias = (t.contiguous() for t in gates)
        stride_gate = _gate_stride(g)
        if stride_gate < 0 or _gate_stride(beta) != stride_gate or g.stride(2) != 1 or beta.stride(2) != 1:
            g, beta = g.contiguous(), beta.contiguous()
            stride_gate = HV
    o = torch.empty(v.shape, dtype=v.dtype, device=v.device) if out is None else out
    if o.shape != v.shape or not o.is_contiguous():
        raise ValueError(f"gdn_snapshots: out must be contiguous {tuple(v.shape)}, got {tuple(o.shape)}")
    if keep is not None:
        if not keep.fits(N, L, H, K, HV, V, k.dtype, 0 if keep.x is None else keep.x.shape[2]):
            raise ValueError(f"gdn_snapshots: kept inputs {tuple(keep.k.shape)} / {tuple(keep.v.shape)} {keep.k.dtype} "
                             f"do not fit a pass of k {(N, L, H, K)}, v {(N, L, HV, V)} {k.dtype}")
        kept = (keep.k, keep.v, keep.g, keep.beta)
    else:
        kept = (o, o, o, o)           # unused (KEEP off)
    BK = triton.next_power_of_2(K)
    BV = min(block_v, triton.next_power_of_2(V))
    grid = (triton.cdiv(V, BV) * N * HV,)
    _gdn_snapshot_kernel[grid](
        q, k, v, g, beta, o, ssm_pool,
        src_slots.to(torch.int64).contiguous(), fresh.to(torch.int32).contiguous(),
        dst_slots.to(torch.int64).contiguous(), save.to(torch.int32).contiguous(), *kept,
        K ** -0.5, ssm_pool.stride(0), L, _row_stride(q), _row_stride(v),
        A_log, dt_bias, stride_gate, H=H, HV=HV, K=K, V=V, BK=BK, BV=BV, RAW_GATES=gates is not None,
        KEEP=keep is not None, num_warps=num_warps, num_stages=3)
    return o


def gdn_commit(keep: KeptInputs, ssm_pool: torch.Tensor, src_slots: torch.Tensor, fresh: torch.Tensor,
               dst_slots: torch.Tensor, accepted: torch.Tensor, block_v: int = COMMIT_BLOCK_V,
               num_warps: int = NUM_WARPS) -> None:
    """The state after position accepted[n] of a deferred pass (`gdn_snapshots(keep=...)`),
    written into pool block dst_slots[n, accepted[n]]: the pass's initial state replayed
    through positions 0 .. accepted[n] from `keep`, the same arithmetic as the snapshot
    kernel's (the same state, bit for bit). src_slots, fresh, accepted [N]; dst_slots [N, L].
    One read and one write of each state instead of one write per position."""
    N, L, H, K = keep.k.shape
    HV, V = keep.v.shape[2], keep.v.shape[3]
    BK = triton.next_power_of_2(K)
    BV = min(block_v, triton.next_power_of_2(V))
    grid = (triton.cdiv(V, BV) * N * HV,)
    _gdn_commit_kernel[grid](
        keep.k, keep.v, keep.g, keep.beta, ssm_pool,
        src_slots.to(torch.int64).contiguous(), fresh.to(torch.int32).contiguous(),
        dst_slots.to(torch.int64).contiguous(), accepted.to(torch.int64).contiguous(),
        ssm_pool.stride(0), L, H=H, HV=HV, K=K, V=V, BK=BK, BV=BV, num_warps=num_warps, num_stages=3)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """x [N, L, heads, dim] as the kernel reads it: token rows at one stride (stride(0) =
    L x stride(1)), heads and dims contiguous; a copy only when the view is not."""
    N, L, Hx, D = x.shape
    if x.stride(3) == 1 and x.stride(2) == D and (N == 1 or x.stride(0) == L * _row_stride(x)):
        return x
    return x.contiguous()


def _row_stride(x: torch.Tensor) -> int:
    return x.stride(1) if x.shape[1] > 1 else x.stride(0)


def _gate_stride(x: torch.Tensor) -> int:
    """Token stride of a [N, L, Hv] gate view whose rows lie at one stride (else -1)."""
    N, L, _ = x.shape
    row = x.stride(1) if L > 1 else x.stride(0)
    return row if N == 1 or x.stride(0) == L * row else -1
