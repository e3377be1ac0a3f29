"""The shape of a captured decode step: what a uniform decode step is, and which size runs it.

Contract: `StepGeometry.of(runner, sizes, max_model_len)` reads, once, what every captured
body, fill and graph of the step is shaped by: k drafts and L = 1 + k inputs a sequence, the
pool's block size, W block-table entries a sequence (room for max_model_len + k + 1 tokens, plus
one), the attention, state and drafter groups, and the captured batch sizes (ascending).
`accepts(reqs)` is whether a step is a uniform decode step of at most max(sizes) requests
(every request past its prefill, feeding L inputs of which k drafts, its tables within W and
its state slots L); `size_for(n)` is the captured size that runs n requests (the smallest one
>= n: rows past n are padding).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_under_test.model.drafter import draft_layer_name


@dataclass(frozen=True)
class StepGeometry:
    sizes: tuple[int, ...]          # captured batch sizes, ascending
    k: int                          # drafts a sequence
    L: int                          # inputs a sequence: its last known token and k drafts
    bs: int                         # the pool's block size (tokens)
    W: int                          # block-table entries a sequence
    attn_gids: tuple[int, ...]      # attention groups of the target and the drafter
    state_gids: tuple[int, ...]     # recurrent-state groups
    draft_gids: tuple[int, ...]     # the drafter's attention groups (none without a drafter)

    @classmethod
    def of(cls, runner, sizes: tuple[int, ...], max_model_len: int) -> "StepGeometry":
        k, bs = runner.k, runner.block_size_tokens
        kv, state = runner.kv, runner.state
        draft_gids = (sorted({kv[draft_layer_name(i)].group_id for i in range(runner.drafter.config.num_hidden_layers)})
                      if runner.drafter else [])
        return cls(sizes=tuple(sorted(sizes)), k=k, L=1 + k, bs=bs, W=-(-(max_model_len + k + 1) // bs) + 1,
                   attn_gids=tuple(sorted({c.group_id for c in kv.values()})),
                   state_gids=tuple(sorted({c.group_id for c in state.values()})), draft_gids=tuple(draft_gids))

    @property
    def max_size(self) -> int:
        return self.sizes[-1]

    def size_for(self, n: int) -> int:
        return next(s for s in self.sizes if s >= n)

    def accepts(self, reqs) -> bool:
        if not 0 < len(reqs) <= self.max_size:
            return False
        for sr in reqs:
            if sr.is_prefill_chunk or sr.num_scheduled_tokens != self.L or len(sr.spec_token_ids) != self.k:
                return False
            if any(len(sr.block_ids[g]) > self.W for g in self.attn_gids):
                return False
            if any(len(sr.state_block_ids[s]) < self.L for s in self.state_gids):
                return False
        return True
