"""The host's side of a captured prefill pass: one request's chunk written into the buffers.

Contract: `PrefillFills(runner, geometry, buffers)`; `fill(sr, S) -> drafting` computes, with
numpy, the pass of request `sr` (a chunk of n <= S inputs with no drafts) padded to S rows, and
writes it in one copy per buffer (`MetaBuffers.fill`; fields not given get their defaults):

    inputs     ids, positions nc .. nc + n - 1, then S - n pad rows repeating the last input and
               its position (`real` 0), `last` n - 1, the sequence length nc + n
    pool rows  each input's (block, row) through its attention group's table; pad rows the null
               block 0 (row 0)
    state      read from the slot the runner remembers (zeros for a new prompt: `fresh`), the
               state after the last input saved to slot 0, as the eager runner saves a chunk's
    drafter    the query block at p .. p + k (p = nc + n, the position of the pass's token) when
               the chunk ends the prompt and the tables hold p + k + 1 tokens (the eager runner's
               rule), else the defaults (the null block; the drafts are not read)

`drafting` says whether the pass's drafts are the request's next ones.
"""

from __future__ import annotations

import numpy as np

from engine_under_test.runtime.prefill_buffers import PrefillBuffers
from engine_under_test.runtime.step_geometry import StepGeometry


class PrefillFills:
    def __init__(self, runner, geometry: StepGeometry, buffers: PrefillBuffers):
        self.runner, self.geo, self.buf = runner, geometry, buffers

    def fill(self, sr, S: int) -> bool:
        geo = self.geo
        bs, W, k = geo.bs, geo.W, geo.k
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
        self.buf.meta.fill(vals)
        if self.buf.dmeta is None:
            return False
        p = nc + n
        drafting = not sr.is_prefill_chunk and min(len(t) for t in sr.block_ids.values()) * bs >= p + k + 1
        dvals = {}
        if drafting:
            q_pos = np.arange(p, p + k + 1, dtype=np.int64)
            dvals = {"q_ids": np.array([0] + [self.runner.drafter.config.mask_token_id] * k, dtype=np.int64),
                     "q_pos": q_pos, "q_seq_lens": np.array([p + k + 1], dtype=np.int64)}
            for g in geo.draft_gids:
                table = np.asarray(sr.block_ids[g], dtype=np.int64)
                dvals |= {f"q_blk{g}": table[q_pos // bs], f"q_row{g}": q_pos % bs}
        self.buf.dmeta.fill(dvals)
        return drafting
