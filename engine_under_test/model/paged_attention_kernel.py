"""Paged attention read in place through the block table: one Triton kernel (split over the KV
axis, flash-decoding style) plus a small combine kernel. No block is gathered.

Shapes: every sequence has the same query length L (a decode / verify step: L = 1 + k, or the
drafter's query block of 1 + k); q [B * L, H, D]; the pool's views k_cache, v_cache
[num_blocks, block_size_tokens, Hkv, D] (strided: one page per block); block_table [B, W]
block ids (entries past a sequence's length point at the null block 0 and are never read
unmasked); seq_lens [B] the KV length after this pass's write; q_positions [B * L] (causal
only: a query at position p reads KV rows 0 .. p). Non-causal (the DFlash query block) reads
rows 0 .. seq_len - 1.

    grid: (B, H / HPP, num_splits)   one program = HPP query heads (of one KV head) x L rows
    rows r = head_in_program * L + t  (HPP * L <= 32 where the heads allow: the HPP query heads
                                       of one KV head share each KV tile read, so a KV head's cache
                                       is read rep / HPP times; bigger tiles (64 rows) spilled to
                                       local memory, which the driver reserves for the whole chip)
    KV tile of BLOCK_N tokens j:  block_table[b, j // block_size], row j % block_size
    online softmax over the program's tiles -> (acc, max, sum) per row
    num_splits == 1: out = acc / sum;  else a combine kernel merges the splits' partials, one
    program per output row (grid (B, H / HPP, HPP * L)), all of a row's splits in one load

Every index lives on the device, so the kernel is captured by a CUDA graph once per batch
size and replayed at any context length. float32 inputs use IEEE dots (no TF32).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_N_TOKENS = 32
TARGET_PROGRAMS = 264          # about two programs per multiprocessor on a 132-SM H200
MAX_SPLITS = 32


@triton.jit
def _paged_attn_kernel(q, k_cache, v_cache, block_table, seq_lens, q_pos, out, part_acc, part_ml,
                       scale, stride_qt, stride_qh, stride_kb, stride_kr, stride_kh, stride_vb, stride_vr,
                       stride_vh, stride_bt, block_size, L, D,
                       REP: tl.constexpr, HPP: tl.constexpr, NUM_SPLITS: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr, IEEE: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    hp = tl.program_id(1)
    split = tl.program_id(2)
    kvh = (hp * HPP) // REP
    r = tl.arange(0, BLOCK_M)
    d = tl.arange(0, BLOCK_D)
    row_ok = r < HPP * L
    head = hp * HPP + r // L
    tok = b * L + r % L
    d_ok = d < D
    qv = tl.load(q + tok[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :],
                 mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    seq_len = tl.load(seq_lens + b)
    if CAUSAL:
        pos = tl.load(q_pos + tok, mask=row_ok, other=0)
    num_tiles = tl.cdiv(seq_len, BLOCK_N)
    per_split = tl.cdiv(num_tiles, NUM_SPLITS)
    start = split * per_split
    end = tl.minimum(start + per_split, num_tiles)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for tile in range(start, end):
        j = tile * BLOCK_N + tl.arange(0, BLOCK_N)
        j_ok = j < seq_len
        blk = tl.load(block_table + b * stride_bt + j // block_size, mask=j_ok, other=0).to(tl.int64)
        rr = (j % block_size).to(tl.int64)
        kv_mask = j_ok[:, None] & d_ok[None, :]
        kt = tl.load(k_cache + blk[:, None] * stride_kb + rr[:, None] * stride_kr + kvh * stride_kh + d[None, :],
                     mask=kv_mask, other=0.0).to(qv.dtype)
        vt = tl.load(v_cache + blk[:, None] * stride_vb + rr[:, None] * stride_vr + kvh * stride_vh + d[None, :],
                     mask=kv_mask, other=0.0).to(qv.dtype)
        if IEEE:
            s = tl.dot(qv, tl.trans(kt), input_precision="ieee")
        else:
            s = tl.dot(qv, tl.trans(kt))
        s = s * scale
        ok = j_ok[None, :] & row_ok[:, None]
        if CAUSAL:
            ok = ok & (j[None, :] <= pos[:, None])
        s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        if IEEE:
            acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), vt, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), vt)
        m_i = m_new
    if NUM_SPLITS == 1:
        o = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        tl.store(out + tok[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :],
                 o.to(out.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])
    else:
        base = (b * tl.num_programs(1) + hp) * NUM_SPLITS + split
        tl.store(part_acc + (base * BLOCK_M + r[:, None]) * BLOCK_D + d[None, :], acc)
        tl.store(part_ml + (base * 2) * BLOCK_M + r, m_i)
        tl.store(part_ml + (base * 2 + 1) * BLOCK_M + r, l_i)


@triton.jit
def _combine_kernel(out, part_acc, part_ml, stride_qt, stride_qh, L, D,
                    HPP: tl.constexpr, NUM_SPLITS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    """One program per output row (b, head group, row r): every split's partial of that row is
    loaded at once as a [NUM_SPLITS, BLOCK_D] tile and reduced (no serial loop over splits)."""
    b = tl.program_id(0).to(tl.int64)
    hp = tl.program_id(1)
    r = tl.program_id(2)
    head = hp * HPP + r // L
    tok = b * L + r % L
    s = tl.arange(0, NUM_SPLITS)
    d = tl.arange(0, BLOCK_D)
    first = (b * tl.num_programs(1) + hp) * NUM_SPLITS
    m = tl.load(part_ml + ((first + s) * 2) * BLOCK_M + r)
    sums = tl.load(part_ml + ((first + s) * 2 + 1) * BLOCK_M + r)
    m_all = tl.max(m, 0)
    w = tl.exp(m - tl.where(m_all == float("-inf"), 0.0, m_all))
    l_all = tl.sum(w * sums, 0)
    acc = tl.load(part_acc + ((first + s[:, None]) * BLOCK_M + r) * BLOCK_D + d[None, :])
    o = tl.sum(w[:, None] * acc, 0) / tl.where(l_all == 0.0, 1.0, l_all)
    tl.store(out + tok * stride_qt + head * stride_qh + d, o.to(out.dtype.element_ty), mask=d < D)


def heads_per_program(num_heads: int, num_kv_heads: int, query_len: int, max_rows: int = 16) -> int:
    """The most query heads of one KV head whose rows fit a `max_rows` tile (at least one)."""
    rep = num_heads // num_kv_heads
    return max([h for h in range(1, rep + 1) if rep % h == 0 and h * query_len <= max_rows] or [1])


def num_splits_for(num_seqs: int, num_programs_per_seq: int, target_programs: int = TARGET_PROGRAMS) -> int:
    """KV splits per (sequence, head group): enough programs to fill the chip, a power of two."""
    want = max(1, target_programs // max(1, num_seqs * num_programs_per_seq))
    return min(MAX_SPLITS, triton.next_power_of_2(want) if want > 1 else 1)


def paged_attention_in_place(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                             block_table: torch.Tensor, seq_lens: torch.Tensor, q_positions: torch.Tensor | None,
                             query_len: int, scale: float, causal: bool, max_tile_rows: int = 32,
                             target_programs: int = TARGET_PROGRAMS, num_warps: int = 4) -> torch.Tensor:
    """q [B * query_len, H, D] -> out [B * query_len, H, D] (q's dtype); see the module docstring.
    The tile knobs (rows per program, programs to aim for, warps) are what
    benchmarks/gpu_attention_sweep.py varies; the defaults are the engine's."""
    T, H, D = q.shape
    B = block_table.shape[0]
    hkv = k_cache.shape[2]
    if T != B * query_len or H % hkv or k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError(f"paged_attention_in_place: q {tuple(q.shape)} for {B} sequences of {query_len} queries, "
                         f"{hkv} KV heads, cache strides {k_cache.stride()}")
    q = q if q.stride(-1) == 1 else q.contiguous()
    rep = H // hkv
    hpp = heads_per_program(H, hkv, query_len, max_tile_rows)
    groups = H // hpp
    block_m = max(16, triton.next_power_of_2(hpp * query_len))
    block_d = max(16, triton.next_power_of_2(D))
    splits = num_splits_for(B, groups, target_programs)
    out = torch.empty(T, H, D, dtype=q.dtype, device=q.device)
    if splits > 1:
        part_acc = torch.empty(B * groups * splits * block_m * block_d, dtype=torch.float32, device=q.device)
        part_ml = torch.empty(B * groups * splits * 2 * block_m, dtype=torch.float32, device=q.device)
    else:
        part_acc = part_ml = out
    pos = q_positions if causal else seq_lens
    _paged_attn_kernel[(B, groups, splits)](
        q, k_cache, v_cache, block_table, seq_lens, pos, out, part_acc, part_ml, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), block_table.stride(0),
        k_cache.shape[1], query_len, D, REP=rep, HPP=hpp, NUM_SPLITS=splits, BLOCK_M=block_m,
        BLOCK_N=BLOCK_N_TOKENS, BLOCK_D=block_d, CAUSAL=causal, IEEE=q.dtype == torch.float32,
        num_warps=num_warps, num_stages=2)
    if splits > 1:
        _combine_kernel[(B, groups, hpp * query_len)](out, part_acc, part_ml, out.stride(0), out.stride(1),
                                                      query_len, D, HPP=hpp, NUM_SPLITS=splits, BLOCK_M=block_m,
                                                      BLOCK_D=block_d, num_warps=num_warps)
    return out
