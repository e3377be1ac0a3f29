"""`chained_inputs.chain_inputs` in one Triton kernel, written straight into the decode meta buffer.

A pipelined step's chain graph derives step n + 1's inputs from step n's results on the device.
In torch that is about 25 small ops plus a where and a copy per meta field: some 50 launches,
each a few microseconds of device time in a graph, for a few hundred integers. Here one program
per sequence b of step n + 1 does the same arithmetic and writes the same fields in place:

    r = prev_row[b];  r < 0: the row keeps the host's values (nothing is written)
    m = clamp(accepted[r], 0, k);  d_j = drafts[r, j] if drafting[r] else -1
    ids[b] = [argmax[r, m], max(d_1, 0) .. max(d_k, 0)];  drafts[b] = d
    nc = nc_opt[b] - (k - m);  pos[b] = nc .. nc + k;  seq_lens[b] = nc + 1 + k
    per attention group g: blk{g}[b] = table{g}[b, pos // block_size], row{g}[b] = pos % block_size
    per state group s:     src{s}[b] = dst{s}[b, m]

The fields are read and written at their offsets in `MetaBuffers.device_buffer` (int64); every
field it reads (prev_row, nc_opt, the tables and dst) is one it does not write, and program b
touches only row b. Imported lazily: needs Triton (CUDA). `tests/engine_under_test/
test_chain_kernel.py` checks it against `chain_inputs` (on CUDA and under Triton's interpreter).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _chain_kernel(meta, argmax, accepted, drafting, drafts, attn_fields, state_fields,
                  off_prev, off_nc, off_ids, off_pos, off_seq, off_drafts, W, block_size,
                  K: tl.constexpr, BL: tl.constexpr, G: tl.constexpr, S: tl.constexpr):
    L: tl.constexpr = K + 1
    b = tl.program_id(0).to(tl.int64)
    r = tl.load(meta + off_prev + b)
    if r >= 0:
        m = tl.minimum(tl.maximum(tl.load(accepted + r), 0), K)
        t = tl.arange(0, BL)
        live = t < L
        has = tl.load(drafting + r) != 0
        d = tl.load(drafts + r * K + t - 1, mask=live & (t >= 1) & has, other=-1)      # d_{t-1}
        ids = tl.where(t == 0, tl.load(argmax + r * L + m), tl.maximum(d, 0))
        nc = tl.load(meta + off_nc + b) - (K - m)
        pos = nc + t
        tl.store(meta + off_ids + b * L + t, ids, mask=live)
        tl.store(meta + off_pos + b * L + t, pos, mask=live)
        tl.store(meta + off_seq + b, nc + L)
        tl.store(meta + off_drafts + b * K + t - 1, d, mask=live & (t >= 1))
        for g in tl.static_range(G):
            off_table = tl.load(attn_fields + 3 * g)
            blk = tl.load(meta + off_table + b * W + pos // block_size, mask=live, other=0)
            tl.store(meta + tl.load(attn_fields + 3 * g + 1) + b * L + t, blk, mask=live)
            tl.store(meta + tl.load(attn_fields + 3 * g + 2) + b * L + t, pos % block_size, mask=live)
        for s in tl.static_range(S):
            src = tl.load(meta + tl.load(state_fields + 2 * s) + b * L + m)
            tl.store(meta + tl.load(state_fields + 2 * s + 1) + b, src)


class ChainFields:
    """Where `chain_in_place` reads and writes in a meta buffer: the offsets of its fields, as
    Python ints and, for the groups, one small device tensor each (made once: a captured graph
    reads them at a fixed address). `offsets` is `MetaBuffers.offsets`; `attn_gids`,
    `state_gids` the step's attention and state groups; `table_width` W of table{g} [Bm, W]."""

    def __init__(self, offsets: dict[str, int], attn_gids, state_gids, table_width: int, device: torch.device):
        self.offsets = {name: offsets[name] for name in ("prev_row", "nc_opt", "ids", "pos", "seq_lens", "drafts")}
        self.num_attn, self.num_state, self.table_width = len(attn_gids), len(state_gids), table_width
        attn = [offsets[f"{name}{g}"] for g in attn_gids for name in ("table", "blk", "row")]
        state = [offsets[f"{name}{s}"] for s in state_gids for name in ("dst", "src")]
        self.attn = torch.tensor(attn or [0], dtype=torch.int64, device=device)
        self.state = torch.tensor(state or [0], dtype=torch.int64, device=device)


def chain_in_place(meta: torch.Tensor, fields: ChainFields, argmax: torch.Tensor, accepted: torch.Tensor,
                   drafting: torch.Tensor, drafts: torch.Tensor, num_seqs: int, k: int,
                   block_size_tokens: int) -> None:
    """The chain of the module docstring for the first `num_seqs` sequences of `meta` (the
    int64 device buffer the fields live in); argmax [>= Bm (k + 1)], accepted, drafting [Bm],
    drafts [Bm k] are step n's results (int64)."""
    o = fields.offsets
    _chain_kernel[(num_seqs,)](
        meta, argmax, accepted, drafting, drafts, fields.attn, fields.state,
        o["prev_row"], o["nc_opt"], o["ids"], o["pos"], o["seq_lens"], o["drafts"], fields.table_width,
        block_size_tokens, K=k, BL=triton.next_power_of_2(k + 1), G=fields.num_attn, S=fields.num_state,
        num_warps=1)
