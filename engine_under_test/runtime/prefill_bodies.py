"""The captured body of a prefill pass: one sequence's chunk, padded to a bucket of S rows.

Contract: `PrefillBodies(runner, geometry, buffers)`; `run(S)` computes, from and into
`PrefillBuffers` and the pool, with no host read and no data-dependent shape (so a CUDA graph
captures it once per bucket, prefill_graphs.py; off CUDA it runs eagerly with the same result):

    target   embed .. layers .. norm over the S rows: the sequence's n inputs, then S - n pad
             rows (`real` 0) that repeat its last input and position. A pad row writes its K/V
             to the null block; in the Gated-DeltaNet layers its gate and step size are 0, which
             leaves the recurrent state as it is, and the conv state is read at the last input
             (the ragged group's rule, model/linear_attention.py), so the state saved to the
             sequence's slot 0 is the state after its last input. Then the logits of the last
             input's row (`last`) and their argmax into `tokens.argmax`.
    draft    (with a drafter) the context K/V of the S rows (pad rows into the null block), the
             query block [that argmax, mask x k] at the positions the host filled (a pass that
             does not draft: the null block, which nothing reads), the argmax of its k mask rows
             into `tokens.drafts`.

Attention over S rows goes through the table with masked SDPA (static_batch.py: the decode
kernel's tiles are for short queries); fla's chunked rule takes one sequence with no packing.
"""

from __future__ import annotations

import torch

from engine_under_test.model.linear_attention import StateSlots
from engine_under_test.model.static_batch import StaticBatch
from engine_under_test.runtime.prefill_buffers import PrefillBuffers
from engine_under_test.runtime.step_bodies import argmax_into
from engine_under_test.runtime.step_geometry import StepGeometry


class PrefillBodies:
    def __init__(self, runner, geometry: StepGeometry, buffers: PrefillBuffers):
        self.runner, self.geo, self.buf = runner, geometry, buffers

    def run(self, S: int) -> None:
        aux = self.target(S)
        if self.runner.drafter is not None:
            self.draft(S, aux)

    def target(self, S: int) -> torch.Tensor | None:
        geo, m, buf, r = self.geo, self.buf.meta, self.buf, self.runner
        batch = StaticBatch(1, S, geo.bs, True, m.view("pos")[:S], m.view("seq_lens"),
                            {g: m.view(f"table{g}") for g in geo.attn_gids},
                            {g: (m.view(f"blk{g}")[:S], m.view(f"row{g}")[:S]) for g in geo.attn_gids},
                            real_mask=(m.view("real")[:S] != 0).view(1, S))
        last = m.view("last")
        for s in geo.state_gids:
            batch.set_state_slots(s, StateSlots(
                src=m.view(f"src{s}"), fresh=m.view(f"fresh{s}") != 0, any_fresh=True, all_states=False,
                save_seq=buf.save_seq, save_pos=last, save_dst=m.view(f"dst{s}"), dst_grid=None, save_grid=None,
                ragged=True))
        hidden, aux = r.target(m.view("ids")[:S], batch, r.kv, r.state, r.aux_layer_ids)
        torch.mm(hidden.index_select(0, last), r.target.lm_head.weight.t(), out=buf.logits[:1])
        argmax_into(buf.logits[:1], buf.tokens.argmax[:1])
        return aux

    def draft(self, S: int, aux: torch.Tensor) -> None:
        r, geo, m, d, buf = self.runner, self.geo, self.buf.meta, self.buf.dmeta, self.buf
        k = geo.k
        r.drafter.write_context(aux, m.view("pos")[:S],
                                {g: (m.view(f"blk{g}")[:S], m.view(f"row{g}")[:S]) for g in geo.draft_gids}, r.kv)
        d.view("q_ids")[:1].copy_(buf.tokens.argmax[:1])          # the query block opens with the pass's token
        batch = StaticBatch(1, k + 1, geo.bs, False, d.view("q_pos"), d.view("q_seq_lens"),
                            {g: m.view(f"table{g}") for g in geo.draft_gids},
                            {g: (d.view(f"q_blk{g}"), d.view(f"q_row{g}")) for g in geo.draft_gids})
        hidden = r.drafter(d.view("q_ids"), batch, r.kv)
        torch.mm(hidden[1:], r.drafter.lm_head.weight.t(), out=buf.logits[:k])
        argmax_into(buf.logits[:k], buf.tokens.drafts[:k])
