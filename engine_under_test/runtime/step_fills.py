"""The host's side of a captured decode step: its requests written into the step's buffers.

Contract: `StepFills(runner, geometry, buffers)`; each fill computes, with numpy, what the
host knows of a step and writes it in ONE copy (`MetaBuffers.fill`; fields not given get their
defaults, so rows past the step's requests are padding):

    target(reqs, acceptance)   a step whose inputs the host knows: ids, positions, sequence
                               lengths, drafts, block tables and each input's pool (block, row),
                               state slots (read from the slot the runner remembers, every
                               position saved), the acceptance model's inputs
    chained(reqs, prev, acceptance)  a step launched behind `prev` before prev's results: what is
                               known before them (`known_fields`), the optimistic num_computed and
                               each request's row in prev; the chain body derives the rest
    draft(reqs, sampled, accepted) -> drafting   the two-sync path's drafter query block, from
                               the host's verification; the indices of the requests that draft
"""

from __future__ import annotations

from itertools import chain

import numpy as np

from engine_under_test.runtime.step_buffers import StepBuffers
from engine_under_test.runtime.step_geometry import StepGeometry


class StepFills:
    def __init__(self, runner, geometry: StepGeometry, buffers: StepBuffers):
        self.runner, self.geo, self.buf = runner, geometry, buffers

    def known_fields(self, reqs) -> dict[str, np.ndarray]:
        """The fields the host knows of a step before its predecessor's results: block tables,
        drafting capacities, state slots (every position saved)."""
        geo, n = self.geo, len(reqs)
        L, W, bs = geo.L, geo.W, geo.bs
        vals = {}
        if self.runner.drafter is not None:
            vals["capacity_tokens"] = np.fromiter((min(map(len, sr.block_ids.values())) * bs for sr in reqs),
                                                  dtype=np.int64, count=n)
        for g in geo.attn_gids:
            vals[f"table{g}"] = np.array([[*t, *[0] * (W - len(t))] for t in (sr.block_ids[g] for sr in reqs)],
                                         dtype=np.int64)
        save = np.ones((n, L), dtype=np.int64)
        for s in geo.state_gids:
            vals[f"dst{s}"] = np.array([sr.state_block_ids[s][:L] for sr in reqs], dtype=np.int64)
            vals[f"save{s}"] = save
        return vals

    def acceptance_fields(self, n: int, acceptance) -> dict[str, np.ndarray]:
        """The verify graph's rule inputs for n sequences: nothing (greedy judging, the buffers'
        defaults) without an acceptance model, else modeled 1, its thresholds and n x k draws."""
        if acceptance is None or self.runner.drafter is None:
            return {}
        k = self.geo.k
        return {"modeled": np.ones(1, dtype=np.int64), "thresholds": np.array(acceptance.thresholds(k), dtype=np.int64),
                "draws": acceptance.draws(n, k)}

    def target(self, reqs, acceptance=None) -> None:
        geo, n = self.geo, len(reqs)
        L, bs = geo.L, geo.bs
        vals = self.known_fields(reqs) | self.acceptance_fields(n, acceptance)
        nc = np.fromiter((sr.num_computed_tokens for sr in reqs), dtype=np.int64, count=n)
        pos = nc[:, None] + np.arange(L)
        ids = np.fromiter(chain.from_iterable(sr.token_ids for sr in reqs), dtype=np.int64, count=n * L)
        vals |= {"ids": np.maximum(ids, 0), "pos": pos.reshape(-1), "seq_lens": nc + L}
        if self.runner.drafter is not None:
            vals["drafts"] = np.array([sr.spec_token_ids for sr in reqs], dtype=np.int64)
        rows = np.arange(n)[:, None]
        for g in geo.attn_gids:
            vals[f"blk{g}"] = vals[f"table{g}"][rows, pos // bs].reshape(-1)
            vals[f"row{g}"] = (pos % bs).reshape(-1)
        first = np.fromiter((self.runner.state_index(sr) for sr in reqs), dtype=np.int64, count=n)
        fresh = (nc == 0).astype(np.int64)
        for s in geo.state_gids:
            vals |= {f"src{s}": vals[f"dst{s}"][np.arange(n), first], f"fresh{s}": fresh}
        self.buf.meta.fill(vals)

    def chained(self, reqs, prev, acceptance=None) -> None:
        """What the host knows of a chained step (`known_fields`, the acceptance model's inputs),
        the optimistic num_computed_tokens and each request's row in `prev` (a launched step:
        `row_of`); the rest is the chain body's."""
        n = len(reqs)
        vals = self.known_fields(reqs) | self.acceptance_fields(n, acceptance)
        vals |= {"prev_row": np.fromiter((prev.row_of[sr.req_id] for sr in reqs), dtype=np.int64, count=n),
                 "nc_opt": np.fromiter((sr.num_computed_tokens for sr in reqs), dtype=np.int64, count=n),
                 **{f"fresh{s}": np.zeros(n, dtype=np.int64) for s in self.geo.state_gids}}
        self.buf.meta.fill(vals)

    def draft(self, reqs, sampled: dict[str, list[int]], accepted: dict[str, int]) -> list[int]:
        """Fills the drafter's buffers; returns the indices of the requests that draft."""
        geo, n = self.geo, len(reqs)
        k, bs, L = geo.k, geo.bs, geo.L
        q_ids = np.zeros((n, k + 1), dtype=np.int64)
        q_pos = np.zeros((n, k + 1), dtype=np.int64)
        q_seq = np.ones(n, dtype=np.int64)
        q_blk = {g: np.zeros((n, k + 1), dtype=np.int64) for g in geo.draft_gids}
        q_row = {g: np.zeros((n, k + 1), dtype=np.int64) for g in geo.draft_gids}
        drafting = []
        mask_id = self.runner.drafter.config.mask_token_id
        for b, sr in enumerate(reqs):
            m = accepted[sr.req_id]
            p = sr.num_computed_tokens + L - k + m
            if min(len(t) for t in sr.block_ids.values()) * bs < p + k + 1:
                continue                  # at max_model_len: no room to draft (as the eager runner)
            drafting.append(b)
            q_ids[b] = [sampled[sr.req_id][-1]] + [mask_id] * k
            q_pos[b] = np.arange(p, p + k + 1)
            q_seq[b] = p + k + 1
            for g in geo.draft_gids:
                table = sr.block_ids[g]
                q_blk[g][b] = [table[x // bs] for x in q_pos[b]]
                q_row[g][b] = q_pos[b] % bs
        vals = {"q_ids": q_ids.reshape(-1), "q_pos": q_pos.reshape(-1), "q_seq_lens": q_seq}
        for g in geo.draft_gids:
            vals |= {f"q_blk{g}": q_blk[g].reshape(-1), f"q_row{g}": q_row[g].reshape(-1)}
        self.buf.dmeta.fill(vals)
        return drafting
