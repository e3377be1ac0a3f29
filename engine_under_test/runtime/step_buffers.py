"""The fixed device buffers of a captured decode step, sized for its largest captured batch.

Contract: `StepBuffers(runner, geometry)` allocates, once, everything a captured body reads or
writes outside the pool (a CUDA graph captures their addresses):

    meta     MetaBuffers (decode_buffers.py) of the target step's inputs: ids, pos, seq_lens,
             per attention group table{g} [Bm, W], blk{g} / row{g} (the pool row of each input),
             per state group src{s} / fresh{s} [Bm], dst{s} / save{s} [Bm, L]; with a drafter the
             one-sync path's drafts [Bm, k], capacity_tokens [Bm], the acceptance rule's modeled
             [1], thresholds [k] and draws [Bm, k]; the chain's prev_row and nc_opt [Bm]
    dmeta    MetaBuffers of the drafter's query block (with a drafter): q_ids, q_pos [Bm (k + 1)],
             q_seq_lens [Bm], q_blk{g} / q_row{g} per drafter group
    logits   [Bm max(L, k), vocab] in the lm head's dtype (target rows, then drafter rows)
    tokens   StepTokens (device_verify.py): every result of a step in one buffer; `argmax` and
             `draft_argmax` are its views
    deferred DeferredStates (model/deferred_states.py) of the verify pass (with a drafter)
    chain_fields  ChainFields (chain_kernel.py) of the meta buffer (with a drafter, on CUDA)

Defaults (what padded rows hold): seq_lens 1, prev_row -1, fresh 1, drafts -1, q_seq_lens 1,
every other field 0.
"""

from __future__ import annotations

import torch

from engine_under_test.model.deferred_states import DeferredStates
from engine_under_test.runtime.decode_buffers import MetaBuffers
from engine_under_test.runtime.device_verify import StepTokens
from engine_under_test.runtime.step_geometry import StepGeometry


class StepBuffers:
    def __init__(self, runner, geometry: StepGeometry):
        g = geometry
        Bm, L, W, k = g.max_size, g.L, g.W, g.k
        dev = runner.device
        has_drafter = runner.drafter is not None
        f = {"ids": (Bm * L,), "pos": (Bm * L,), "seq_lens": (Bm,), "prev_row": (Bm,), "nc_opt": (Bm,)}
        defaults = {"seq_lens": 1, "prev_row": -1, **{f"fresh{s}": 1 for s in g.state_gids}}
        if has_drafter:    # the one-sync path's inputs (padding: no drafts, no room)
            # modeled [1]: 1 = an acceptance model decides (thresholds [k], draws [Bm, k]), 0 = greedy
            f |= {"drafts": (Bm, k), "capacity_tokens": (Bm,), "modeled": (1,), "thresholds": (k,), "draws": (Bm, k)}
            defaults["drafts"] = -1
        for a in g.attn_gids:
            f |= {f"table{a}": (Bm, W), f"blk{a}": (Bm * L,), f"row{a}": (Bm * L,)}
        for s in g.state_gids:
            f |= {f"src{s}": (Bm,), f"fresh{s}": (Bm,), f"dst{s}": (Bm, L), f"save{s}": (Bm, L)}
        self.meta = MetaBuffers(f, defaults, dev)
        self.dmeta = None
        if has_drafter:
            d = {"q_ids": (Bm * (k + 1),), "q_pos": (Bm * (k + 1),), "q_seq_lens": (Bm,)}
            for a in g.draft_gids:
                d |= {f"q_blk{a}": (Bm * (k + 1),), f"q_row{a}": (Bm * (k + 1),)}
            self.dmeta = MetaBuffers(d, {"q_seq_lens": 1}, dev)
        lm_head = runner.target.lm_head.weight
        self.logits = torch.empty(Bm * max(L, k), lm_head.shape[0], dtype=lm_head.dtype, device=dev)
        self.tokens = StepTokens(Bm, L, k, dev)          # every result of the step, one buffer
        self.argmax, self.draft_argmax = self.tokens.argmax, self.tokens.drafts
        # the verify pass writes no recurrent state; the commit writes the accepted one
        self.deferred = DeferredStates(Bm) if has_drafter else None
        self.chain_fields = None
        if has_drafter and dev.type == "cuda":
            from engine_under_test.runtime.chain_kernel import ChainFields

            self.chain_fields = ChainFields(self.meta.offsets, g.attn_gids, g.state_gids, W, dev)

    def reset(self) -> None:
        """Every field back to its default (before capture: padded rows are valid inputs)."""
        self.meta.fill({})
        if self.dmeta is not None:
            self.dmeta.fill({})
