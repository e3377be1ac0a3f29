"""The drafter's context (`ModelRunner._draft_context`) is the accepted inputs of every scheduled
request: for request b, the pass's rows query_start_loc[b] .. + n_ctx (n_ctx = its inputs less its
drafts plus the drafts it accepted), at positions num_computed .. + n_ctx, stored at the pool rows
its block tables give in each of the drafter's cache groups.

Every call of an engine's steps is checked against that statement, computed here from the step's
requests: the residual streams, the positions and the pool slots must be equal. Prompt steps
(every input accepted) take the pass's own tensors as they are, and verify steps with rejected
drafts gather; both kinds must occur.
"""

from __future__ import annotations

import random

import torch

from engine_under_test.llm import LLM, SamplingParams
from engine_under_test.model.forward_batch import slots_for


def _expected(runner, reqs, batch, aux, accepted):
    rows, pos, qsl = [], [], [0]
    for b, sr in enumerate(reqs):
        n_ctx = sr.num_scheduled_tokens - len(sr.spec_token_ids) + accepted.get(sr.req_id, 0)
        rows += list(range(batch.query_start_loc[b], batch.query_start_loc[b] + n_ctx))
        pos += list(range(sr.num_computed_tokens, sr.num_computed_tokens + n_ctx))
        qsl.append(qsl[-1] + n_ctx)
    slots = {g: slots_for([list(sr.block_ids[g]) for sr in reqs], qsl, pos, runner.block_size_tokens, aux.device)
             for g in runner.draft_gids}
    return aux[torch.tensor(rows, dtype=torch.long)], torch.tensor(pos), slots


def test_the_drafters_context_is_the_accepted_inputs_of_every_request(tiny_checkpoints):
    target, draft = tiny_checkpoints
    llm = LLM(target, {"method": "dflash", "model": str(draft), "num_speculative_tokens": 4}, max_num_seqs=4,
              max_model_len=256, max_num_batched_tokens=96, kv_cache_memory_bytes=12 * 2**20, enforce_eager=True)
    runner = llm.engine.runner
    assert runner.draft_gids
    inner, kinds = runner._draft_context, {"own": 0, "gathered": 0}

    def checked(reqs, batch, aux, accepted):
        ctx, positions, slots = inner(reqs, batch, aux, accepted)
        want_ctx, want_pos, want_slots = _expected(runner, reqs, batch, aux, accepted)
        assert torch.equal(ctx, want_ctx) and torch.equal(positions.cpu(), want_pos)
        assert slots.keys() == want_slots.keys()
        for g, (blocks, rows) in slots.items():
            assert torch.equal(blocks, want_slots[g][0]) and torch.equal(rows, want_slots[g][1]), g
        kinds["own" if ctx is aux else "gathered"] += 1
        return ctx, positions, slots
    runner._draft_context = checked

    rng = random.Random(3)
    prompts = [[rng.randrange(2, 1000) for _ in range(n)] for n in (5, 23, 70, 41, 12)]
    llm.generate(prompts, [SamplingParams(max_tokens=n, temperature=0, ignore_eos=True) for n in (17, 9, 24, 30, 3)])
    assert kinds["own"] >= 1 and kinds["gathered"] >= 1, kinds
