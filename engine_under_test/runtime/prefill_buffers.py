"""The fixed device buffers of a captured prefill pass, sized for its largest bucket.

Contract: `PrefillBuffers(runner, geometry, max_tokens)` allocates, once, everything a captured
prefill body (prefill_bodies.py) reads or writes outside the pool; a CUDA graph captures their
addresses. S = max_tokens rows:

    meta    MetaBuffers (decode_buffers.py) of the pass's inputs: ids, pos, real [S] (1: one of
            the sequence's inputs, 0: a pad row), last [1] (the row of its last input), seq_lens
            [1], per attention group table{g} [1, W], blk{g} / row{g} [S] (the pool row of each
            input), per state group src{s}, fresh{s}, dst{s} [1]
    dmeta   MetaBuffers of the drafter's query block (with a drafter): q_ids, q_pos [k + 1],
            q_seq_lens [1], q_blk{g} / q_row{g} [k + 1] per drafter group
    logits  [max(1, k), vocab] in the lm head's dtype (the last input's row, then the drafter's)
    tokens  StepTokens (device_verify.py) of one sequence: the pass's token (`argmax` [1]) and
            drafts [k], one device-to-host read
    save_seq  [1] zeros: the sequence, within the pass, whose state is saved

Defaults (pad rows, and a pass that does not draft): fresh 1, seq_lens 1, q_seq_lens 1, every
other field 0 (the null block 0, which no request owns).
"""

from __future__ import annotations

import torch

from engine_under_test.runtime.decode_buffers import MetaBuffers
from engine_under_test.runtime.device_verify import StepTokens
from engine_under_test.runtime.step_geometry import StepGeometry


class PrefillBuffers:
    def __init__(self, runner, geometry: StepGeometry, max_tokens: int):
        g, S, k = geometry, max_tokens, geometry.k
        dev = runner.device
        f = {"ids": (S,), "pos": (S,), "real": (S,), "last": (1,), "seq_lens": (1,)}
        for a in g.attn_gids:
            f |= {f"table{a}": (1, g.W), f"blk{a}": (S,), f"row{a}": (S,)}
        for s in g.state_gids:
            f |= {f"src{s}": (1,), f"fresh{s}": (1,), f"dst{s}": (1,)}
        self.meta = MetaBuffers(f, {"seq_lens": 1, **{f"fresh{s}": 1 for s in g.state_gids}}, dev)
        self.dmeta = None
        if runner.drafter is not None:
            d = {"q_ids": (k + 1,), "q_pos": (k + 1,), "q_seq_lens": (1,)}
            for a in g.draft_gids:
                d |= {f"q_blk{a}": (k + 1,), f"q_row{a}": (k + 1,)}
            self.dmeta = MetaBuffers(d, {"q_seq_lens": 1}, dev)
        lm_head = runner.target.lm_head.weight
        self.logits = torch.empty(max(1, k), lm_head.shape[0], dtype=lm_head.dtype, device=dev)
        self.tokens = StepTokens(1, 1, k, dev)
        self.save_seq = torch.zeros(1, dtype=torch.long, device=dev)
        self.max_tokens = S

    def reset(self) -> None:
        """Every field back to its default (before capture: a pass of pad rows only is valid)."""
        self.meta.fill({})
        if self.dmeta is not None:
            self.dmeta.fill({})
