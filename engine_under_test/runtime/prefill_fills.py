"""The host's side of a captured prefill pass: the requests' chunks written into the buffers.

Contract: `PrefillFills(runner, geometry, buffers)`; `fill(reqs, G, S) -> drafting` computes, with
numpy, the pass of requests `reqs` (at most G, each a chunk of n <= S inputs with no drafts), each
padded to S rows, request i in rows i S .. i S + S - 1, and writes it in one copy per buffer
(`MetaBuffers.fill`; fields not given get their defaults: the rows and slots of the G - len(reqs)
pad sequences):

    inputs     ids, positions nc .. nc + n - 1, then S - n pad rows repeating the last input and
               its position (`real` 0), `last` n - 1, the sequence length nc + n
    pool rows  each input's (block, row) through its attention group's table; pad rows the null
               block 0 (row 0)
    state      read from the slot the runner remembers (zeros for a new prompt: `fresh`), the
               state after the last input saved to slot 0, as the eager runner saves a chunk's
    drafter    the query block at p .. p + k (p = nc + n, the position of the pass's token) when
               the chunk ends the prompt and the tables hold p + k + 1 tokens (the eager runner's
               rule), else the defaults (the null block; the drafts are not read)

`drafting[i]` says whether request i's drafts are its next ones.
"""

from __future__ import annotations

import numpy as np

from engine_under_test.runtime.prefill_buffers import PrefillBuffers
from engine_under_test.runtime.step_geometry import StepGeometry


class PrefillFills:
    def __init__(self, runner, geometry: StepGeometry, buffers: PrefillBuffers):
        self.runner, self.geo, self.buf = runner, geometry, buffers

    def fill(self, reqs, G: int, S: int) -> list[bool]:
        geo = self.geo
        if not 0 < len(reqs) <= G:
            raise ValueError(f"prefill fills: {len(reqs)} requests for a pass of {G} sequences")
        per_seq = [self._inputs(sr, S) for sr in reqs]
        vals = {name: np.concatenate([v[name] for v in per_seq]) for name in per_seq[0]}
        self.buf.meta.fill(vals)
        if self.buf.dmeta is None:
            return [False] * len(reqs)
        drafting, blocks = [], []
        for sr in reqs:
            p = sr.num_computed_tokens + sr.num_scheduled_tokens
            drafting.append(not sr.is_prefill_chunk
                            and min(len(t) for t in sr.block_ids.values()) * geo.bs >= p + geo.k + 1)
            blocks.append(self._query_block(sr, p) if drafting[-1] else self._no_query_block())
        self.buf.dmeta.fill({name: np.concatenate([b[name] for b in blocks]) for name in blocks[0]})
        return drafting

    def _inputs(self, sr, S: int) -> dict[str, np.ndarray]:
        """One request's fields: S rows, and its per-sequence entries."""
        geo = self.geo
        bs, W = geo.bs, geo.W
        n, nc = sr.num_scheduled_tokens, sr.num_computed_tokens
        ids = np.maximum(np.asarray(sr.token_ids, dtype=np.int64), 0)
        rows = np.minimum(np.arange(S), n - 1)                 # pad rows repeat the last input
        pos = nc + rows
        real = (np.arange(S) < n).astype(np.int64)
        vals = {"ids": ids[rows], "pos": pos, "real": real, "last": np.array([n - 1], dtype=np.int64),
                "seq_lens": np.array([nc + n], dtype=np.int64)}
        for g in geo.attn_gids:
            table = np.array(sr.block_ids[g], dtype=np.int64)
            vals[f"table{g}"] = np.concatenate([table, np.zeros(W - len(table), dtype=np.int64)])[None, :]
            vals[f"blk{g}"] = np.where(real != 0, table[pos // bs], 0)
            vals[f"row{g}"] = np.where(real != 0, pos % bs, 0)
        first = self.runner.state_index(sr)
        for s in geo.state_gids:
            slots = sr.state_block_ids[s]
            vals |= {f"src{s}": np.array([slots[first]], dtype=np.int64),
                     f"fresh{s}": np.array([int(nc == 0)], dtype=np.int64),
                     f"dst{s}": np.array([slots[0]], dtype=np.int64)}
        return vals

    def _query_block(self, sr, p: int) -> dict[str, np.ndarray]:
        """The drafter's query block of a request that drafts: [its token, mask x k] at p .. p + k."""
        geo, k = self.geo, self.geo.k
        q_pos = np.arange(p, p + k + 1, dtype=np.int64)
        vals = {"q_ids": np.array([0] + [self.runner.drafter.config.mask_token_id] * k, dtype=np.int64),
                "q_pos": q_pos, "q_seq_lens": np.array([p + k + 1], dtype=np.int64)}
        for g in geo.draft_gids:
            table = np.asarray(sr.block_ids[g], dtype=np.int64)
            vals |= {f"q_blk{g}": table[q_pos // geo.bs], f"q_row{g}": q_pos % geo.bs}
        return vals

    def _no_query_block(self) -> dict[str, np.ndarray]:
        """A request that does not draft: its query block in the null block (as the defaults)."""
        k = self.geo.k
        zeros = np.zeros(k + 1, dtype=np.int64)
        vals = {"q_ids": zeros, "q_pos": zeros, "q_seq_lens": np.array([1], dtype=np.int64)}
        for g in self.geo.draft_gids:
            vals |= {f"q_blk{g}": zeros, f"q_row{g}": zeros}
        return vals
