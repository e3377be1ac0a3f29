"""The captured bodies of a decode step: fixed-shape device work on the step's buffers.

Contract: `StepBodies(runner, geometry, buffers)`; each body runs B sequences (a captured size)
from and into `StepBuffers` and the pool, with no host read and no data-dependent shape, so a
CUDA graph captures it once per size (step_graphs.py) and, off CUDA, it runs eagerly with the
same result:

    target(B) -> aux   embed .. layers (pool in place, attention through the block table) ..
                       norm, logits of every row into `logits`, argmax into `tokens.argmax`;
                       with a drafter the Gated-DeltaNet layers write no recurrent state
                       (model/deferred_states.py); aux: the residual streams the drafter reads
    verify(B)          greedy judging or the acceptance model (`modeled` picks one) on the device
                       (device_verify.py): accepted, drafting and emitted tokens into `tokens`, the
                       drafter's query block into `dmeta`
    commit(B)          each layer's state after the accepted prefix into its slot
    chain(B)           a pipelined step's inputs from the previous step's results still in
                       `tokens` (chained_inputs.py; on CUDA one kernel, chain_kernel.py)
    draft(B, aux)      the drafter: context K/V of all L inputs, the query block [last token,
                       mask x k], argmax of the k mask rows into `tokens.drafts`
"""

from __future__ import annotations

import torch

from engine_under_test.model.linear_attention import StateSlots
from engine_under_test.model.static_batch import StaticBatch
from engine_under_test.runtime.chained_inputs import chain_inputs
from engine_under_test.runtime.device_verify import (accepted_lengths, draft_query, emitted_tokens,
                                                     modeled_accepted_lengths)
from engine_under_test.runtime.step_buffers import StepBuffers
from engine_under_test.runtime.step_geometry import StepGeometry


class StepBodies:
    def __init__(self, runner, geometry: StepGeometry, buffers: StepBuffers):
        self.runner, self.geo, self.buf = runner, geometry, buffers

    def target(self, B: int) -> torch.Tensor | None:
        geo, m, buf = self.geo, self.buf.meta, self.buf
        L, T = geo.L, B * geo.L
        batch = StaticBatch(B, L, geo.bs, True, m.view("pos")[:T], m.view("seq_lens")[:B],
                            {g: m.view(f"table{g}")[:B] for g in geo.attn_gids},
                            {g: (m.view(f"blk{g}")[:T], m.view(f"row{g}")[:T]) for g in geo.attn_gids})
        seq = torch.arange(B, device=self.runner.device).repeat_interleave(L)
        pos = torch.arange(L, device=self.runner.device).repeat(B)
        if buf.deferred is not None:
            buf.deferred.begin()
        for s in geo.state_gids:
            dst = m.view(f"dst{s}")[:B]
            batch.set_state_slots(s, StateSlots(
                src=m.view(f"src{s}")[:B], fresh=m.view(f"fresh{s}")[:B] != 0, any_fresh=True, all_states=True,
                save_seq=seq, save_pos=pos, save_dst=dst.reshape(-1), dst_grid=dst, save_grid=m.view(f"save{s}")[:B],
                deferred=buf.deferred))
        r = self.runner
        hidden, aux = r.target(m.view("ids")[:T], batch, r.kv, r.state, r.aux_layer_ids)
        torch.mm(hidden, r.target.lm_head.weight.t(), out=buf.logits[:T])
        argmax_into(buf.logits[:T], buf.argmax[:T])
        return aux

    def verify(self, B: int) -> None:
        """Verification of the B greedy sequences on the device and the drafter's query block
        (device_verify.py): reads the target's argmax, the step's drafts and the acceptance
        model's inputs, writes the drafter's query buffers and the accepted / drafting / emitted
        results. Both rules run (fixed shapes); `modeled` picks one, so one graph serves both."""
        geo, m, buf = self.geo, self.buf.meta, self.buf
        L = geo.L
        argmax = buf.argmax[:B * L].view(B, L)
        drafts = m.view("drafts")[:B]
        judged = accepted_lengths(argmax, drafts)
        modeled = modeled_accepted_lengths(drafts, m.view("draws")[:B], m.view("thresholds"))
        accepted = torch.where(m.view("modeled") != 0, modeled, judged)
        num_computed = m.view("pos")[:B * L].view(B, L)[:, 0]
        tables = {g: m.view(f"table{g}")[:B] for g in geo.draft_gids}
        query, drafting = draft_query(argmax, accepted, num_computed, m.view("capacity_tokens")[:B], tables,
                                      geo.bs, self.runner.drafter.config.mask_token_id)
        for name, value in query.items():
            buf.dmeta.view(name)[:value.numel()].copy_(value.reshape(-1))
        buf.tokens.accepted[:B].copy_(accepted)
        buf.tokens.drafting[:B].copy_(drafting)
        buf.tokens.emitted[:B * L].copy_(emitted_tokens(argmax, drafts, accepted).reshape(-1))

    def commit(self, B: int) -> None:
        """The recurrent state after each sequence's accepted prefix, `tokens.accepted` [B], into
        its slot (model/deferred_states.py; nothing for layers that saved every position)."""
        self.buf.deferred.commit(self.buf.tokens.accepted[:B])

    def chain(self, B: int) -> None:
        """A pipelined step's inputs from the previous step's results, still in `tokens`
        (runtime/chained_inputs.py): rows with prev_row >= 0 get their ids, positions, KV
        (block, row), sequence length, drafts and state source; the others keep the host's."""
        geo, m, t = self.geo, self.buf.meta, self.buf.tokens
        if self.buf.chain_fields is not None:     # CUDA: one kernel (runtime/chain_kernel.py), same values
            from engine_under_test.runtime.chain_kernel import chain_in_place

            chain_in_place(m.device_buffer, self.buf.chain_fields, t.argmax, t.accepted, t.drafting, t.drafts, B,
                           geo.k, geo.bs)
            return
        valid, vals = chain_inputs(t.argmax, t.accepted, t.drafting, t.drafts, m.view("prev_row")[:B],
                                   m.view("nc_opt")[:B], {g: m.view(f"table{g}")[:B] for g in geo.attn_gids},
                                   {s: m.view(f"dst{s}")[:B] for s in geo.state_gids}, geo.k, geo.bs)
        for name, value in vals.items():
            flat = m.view(name).reshape(-1)[:value.numel()]
            keep = valid.view(B, *[1] * (value.dim() - 1)).expand_as(value).reshape(-1)
            flat.copy_(torch.where(keep, value.reshape(-1), flat))

    def draft(self, B: int, aux: torch.Tensor) -> None:
        r, geo, m, d, buf = self.runner, self.geo, self.buf.meta, self.buf.dmeta, self.buf
        k = geo.k
        T, Q = B * geo.L, B * (k + 1)
        r.drafter.write_context(aux, m.view("pos")[:T],
                                {g: (m.view(f"blk{g}")[:T], m.view(f"row{g}")[:T]) for g in geo.draft_gids}, r.kv)
        batch = StaticBatch(B, k + 1, geo.bs, False, d.view("q_pos")[:Q], d.view("q_seq_lens")[:B],
                            {g: m.view(f"table{g}")[:B] for g in geo.draft_gids},
                            {g: (d.view(f"q_blk{g}")[:Q], d.view(f"q_row{g}")[:Q]) for g in geo.draft_gids})
        hidden = r.drafter(d.view("q_ids")[:Q], batch, r.kv)
        rows = hidden.view(B, k + 1, -1)[:, 1:].reshape(B * k, -1)
        torch.mm(rows, r.drafter.lm_head.weight.t(), out=buf.logits[:B * k])
        argmax_into(buf.logits[:B * k], buf.draft_argmax[:B * k])


def argmax_into(logits: torch.Tensor, out: torch.Tensor) -> None:
    """out <- logits.argmax(-1): on CUDA the two-stage kernel (model/argmax_kernel.py, the same
    answer: torch.argmax runs one program per row, which leaves most of the chip idle at a few
    hundred rows of 248k columns), else torch's."""
    if logits.is_cuda:
        from engine_under_test.model.argmax_kernel import argmax_rows

        argmax_rows(logits, out)
    else:
        torch.argmax(logits, dim=-1, out=out)
