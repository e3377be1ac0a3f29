"""The captured body of a prefill pass: G sequences' chunks, each padded to a bucket of S rows.

Contract: `PrefillBodies(runner, geometry, buffers)`; `run(G, S)` computes, from and into
`PrefillBuffers` and the pool, with no host read and no data-dependent shape (so a CUDA graph
captures it once per bucket, prefill_graphs.py; off CUDA it runs eagerly with the same result):

    target   embed .. layers .. norm over the G S rows: sequence i's n_i inputs in rows i S ..,
             then S - n_i pad rows (`real` 0) that repeat its last input and position; a pad
             sequence (past the pass's requests) is pad rows only. A pad row writes its K/V to
             the null block; in the Gated-DeltaNet layers its gate and step size are 0, which
             leaves the recurrent state as it is, and the conv state is read at the last input
             (the ragged group's rule, model/linear_attention.py), so the state saved to each
             sequence's slot is the state after its last input. Then the logits of each
             sequence's last input's row (i S + `last`[i]) and their argmax into `tokens.argmax`.
    draft    (with a drafter) the context K/V of the G S rows (pad rows into the null block), the
             query blocks [that argmax, mask x k] at the positions the host filled (a sequence
             that does not draft: the null block, which nothing reads), the argmax of their k
             mask rows into `tokens.drafts`.

Attention: one sequence (G = 1) goes through its table with masked SDPA (static_batch.py: the
decode kernel's tiles are for short queries), whatever came before the chunk; several sequences
(G > 1, new prompts only: prefill_graphs.py) attend to their own rows, causally
(`StaticBatch(own_keys=True)`). fla's chunked rule takes G equal-length sequences as a plain batch
(no packing).
"""

from __future__ import annotations

import torch

from engine_under_test.model.linear_attention import StateSlots
from engine_under_test.model.static_batch import StaticBatch
from engine_under_test.runtime.prefill_buffers import DRAFT_LOGIT_SEQS, PrefillBuffers
from engine_under_test.runtime.step_bodies import argmax_into
from engine_under_test.runtime.step_geometry import StepGeometry


class PrefillBodies:
    def __init__(self, runner, geometry: StepGeometry, buffers: PrefillBuffers):
        self.runner, self.geo, self.buf = runner, geometry, buffers

    def run(self, G: int, S: int) -> None:
        aux = self.target(G, S)
        if self.runner.drafter is not None:
            self.draft(G, S, aux)

    def target(self, G: int, S: int) -> torch.Tensor | None:
        geo, m, buf, r = self.geo, self.buf.meta, self.buf, self.runner
        T = G * S
        batch = StaticBatch(G, S, geo.bs, True, m.view("pos")[:T], m.view("seq_lens")[:G],
                            {g: m.view(f"table{g}")[:G] for g in geo.attn_gids},
                            {g: (m.view(f"blk{g}")[:T], m.view(f"row{g}")[:T]) for g in geo.attn_gids},
                            real_mask=(m.view("real")[:T] != 0).view(G, S), own_keys=G > 1)
        last = m.view("last")[:G]
        for s in geo.state_gids:
            batch.set_state_slots(s, StateSlots(
                src=m.view(f"src{s}")[:G], fresh=m.view(f"fresh{s}")[:G] != 0, any_fresh=True, all_states=False,
                save_seq=buf.seq_index[:G], save_pos=last, save_dst=m.view(f"dst{s}")[:G], dst_grid=None,
                save_grid=None, ragged=True))
        hidden, aux = r.target(m.view("ids")[:T], batch, r.kv, r.state, r.aux_layer_ids)
        rows = buf.seq_index[:G] * S + last                      # each sequence's last input's row
        torch.mm(hidden.index_select(0, rows), r.target.lm_head.weight.t(), out=buf.logits[:G])
        argmax_into(buf.logits[:G], buf.tokens.argmax[:G])
        return aux

    def draft(self, G: int, S: int, aux: torch.Tensor) -> None:
        r, geo, m, d, buf = self.runner, self.geo, self.buf.meta, self.buf.dmeta, self.buf
        k, T, Q = geo.k, G * S, G * (geo.k + 1)
        r.drafter.write_context(aux, m.view("pos")[:T],
                                {g: (m.view(f"blk{g}")[:T], m.view(f"row{g}")[:T]) for g in geo.draft_gids}, r.kv)
        q_ids = d.view("q_ids")[:Q]
        q_ids.view(G, k + 1)[:, 0].copy_(buf.tokens.argmax[:G])   # each query block opens with its pass's token
        batch = StaticBatch(G, k + 1, geo.bs, False, d.view("q_pos")[:Q], d.view("q_seq_lens")[:G],
                            {g: m.view(f"table{g}")[:G] for g in geo.draft_gids},
                            {g: (d.view(f"q_blk{g}")[:Q], d.view(f"q_row{g}")[:Q]) for g in geo.draft_gids})
        hidden = r.drafter(q_ids, batch, r.kv).view(G, k + 1, -1)[:, 1:]      # the mask rows
        for i in range(0, G, DRAFT_LOGIT_SEQS):
            n = min(DRAFT_LOGIT_SEQS, G - i)
            torch.mm(hidden[i:i + n].reshape(n * k, -1), r.drafter.lm_head.weight.t(), out=buf.logits[:n * k])
            argmax_into(buf.logits[:n * k], buf.tokens.drafts[i * k:(i + n) * k])
