"""The fixed device buffers of a captured prefill pass, sized for its largest bucket.

Contract: `PrefillBuffers(runner, geometry, max_seqs, max_rows)` allocates, once, everything a
captured prefill body (prefill_bodies.py) reads or writes outside the pool; a CUDA graph captures
their addresses. Gm = max_seqs sequences, R = max_rows rows (the largest G x S of a bucket):

    meta    MetaBuffers (decode_buffers.py) of the pass's inputs: ids, pos, real [R] (1: one of
            its sequence's inputs, 0: a pad row; sequence i owns rows i S .. i S + S - 1), last
            [Gm] (each sequence's row of its last input, within its S rows), seq_lens [Gm], per
            attention group table{g} [Gm, W], blk{g} / row{g} [R] (the pool row of each input),
            per state group src{s}, fresh{s}, dst{s} [Gm]
    dmeta   MetaBuffers of the drafter's query blocks (with a drafter): q_ids, q_pos
            [Gm (k + 1)], q_seq_lens [Gm], q_blk{g} / q_row{g} [Gm (k + 1)] per drafter group
    logits  [max(Gm, k x DRAFT_LOGIT_SEQS), vocab] in the lm head's dtype (the last inputs' rows,
            then the drafter's, DRAFT_LOGIT_SEQS sequences at a time)
    tokens  StepTokens (device_verify.py) of Gm sequences: each pass's token (`argmax` [Gm])
            and drafts [Gm k], one device-to-host read
    seq_index  [Gm] 0 .. Gm - 1: the sequence of each saved state, and each sequence's first row / S

Defaults (pad rows, pad sequences, and a pass that does not draft): fresh 1, seq_lens 1,
q_seq_lens 1, every other field 0 (the null block 0, which no request owns).
"""

from __future__ import annotations

import torch

from engine_under_test.runtime.decode_buffers import MetaBuffers
from engine_under_test.runtime.device_verify import StepTokens
from engine_under_test.runtime.step_geometry import StepGeometry

# NOTE: the drafter's logits of G sequences are k rows each; taken 4 sequences at a time, the
# buffer holds 4 k rows (16 MiB at the 2b shapes, k = 8) instead of Gm k (64 MiB at Gm = 16),
# for one more read of the lm head (1 GiB at the 2b shapes: about 0.25 ms) per 4 sequences
DRAFT_LOGIT_SEQS = 4


class PrefillBuffers:
    def __init__(self, runner, geometry: StepGeometry, max_seqs: int, max_rows: int):
        g, Gm, R, k = geometry, max_seqs, max_rows, geometry.k
        dev = runner.device
        f = {"ids": (R,), "pos": (R,), "real": (R,), "last": (Gm,), "seq_lens": (Gm,)}
        for a in g.attn_gids:
            f |= {f"table{a}": (Gm, g.W), f"blk{a}": (R,), f"row{a}": (R,)}
        for s in g.state_gids:
            f |= {f"src{s}": (Gm,), f"fresh{s}": (Gm,), f"dst{s}": (Gm,)}
        self.meta = MetaBuffers(f, {"seq_lens": 1, **{f"fresh{s}": 1 for s in g.state_gids}}, dev)
        self.dmeta = None
        if runner.drafter is not None:
            d = {"q_ids": (Gm * (k + 1),), "q_pos": (Gm * (k + 1),), "q_seq_lens": (Gm,)}
            for a in g.draft_gids:
                d |= {f"q_blk{a}": (Gm * (k + 1),), f"q_row{a}": (Gm * (k + 1),)}
            self.dmeta = MetaBuffers(d, {"q_seq_lens": 1}, dev)
        lm_head = runner.target.lm_head.weight
        rows = max(Gm, k * min(Gm, DRAFT_LOGIT_SEQS), 1)
        self.logits = torch.empty(rows, lm_head.shape[0], dtype=lm_head.dtype, device=dev)
        self.tokens = StepTokens(Gm, 1, k, dev)
        self.seq_index = torch.arange(Gm, dtype=torch.long, device=dev)
        self.max_seqs, self.max_rows = Gm, R

    def reset(self) -> None:
        """Every field back to its default (before capture: a pass of pad rows only is valid)."""
        self.meta.fill({})
        if self.dmeta is not None:
            self.dmeta.fill({})
