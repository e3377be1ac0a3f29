"""Greedy speculative decoding (DFlash, k = 4 and 8) yields exactly the tokens of greedy
non-speculative decoding, for a batch of requests with different prompt and output lengths.

Two drafters: the real DFlash drafter on seeded weights (its drafts are mostly rejected), and
the same drafter whose proposals are replaced by the non-speculative continuation with seeded
corruptions, so every accepted-prefix length 0..k, the state rollback and KV overwrite paths
run. Small pools and a small max_num_batched_tokens force chunked prefill and mixed batches.
"""

from __future__ import annotations

import random

import pytest

from engine_under_test.llm import LLM, SamplingParams

PROMPT_LENGTHS = (5, 23, 70, 41, 12)
OUTPUT_LENGTHS = (17, 9, 24, 30, 3)


def _prompts():
    rng = random.Random(7)
    return [[rng.randrange(2, 1000) for _ in range(n)] for n in PROMPT_LENGTHS]


def _params():
    return [SamplingParams(max_tokens=n, temperature=0, ignore_eos=True) for n in OUTPUT_LENGTHS]


def _llm(target, draft=None, k=0, **kw):
    spec = {"method": "dflash", "model": str(draft), "num_speculative_tokens": k} if draft else None
    return LLM(target, spec, max_num_seqs=4, max_model_len=256, max_num_batched_tokens=96,
               kv_cache_memory_bytes=12 * 2**20, **kw)


@pytest.fixture(scope="module")
def reference(tiny_checkpoints):
    target, _ = tiny_checkpoints
    outs = _llm(target).generate(_prompts(), _params())
    return [o.output_token_ids for o in outs]


@pytest.mark.parametrize("k", [4, 8])
def test_dflash_greedy_is_lossless(tiny_checkpoints, reference, k):
    target, draft = tiny_checkpoints
    llm = _llm(target, draft, k)
    outs = llm.generate(_prompts(), _params())
    assert [o.output_token_ids for o in outs] == reference
    assert [len(o.output_token_ids) for o in outs] == list(OUTPUT_LENGTHS)
    assert llm.engine.stats().num_draft_tokens > 0


@pytest.mark.parametrize("k", [4, 8])
def test_accepting_drafts_is_lossless(tiny_checkpoints, reference, k, scripted_runner):
    target, draft = tiny_checkpoints
    llm = _llm(target, draft, k)
    full = {str(i): p + r for i, (p, r) in enumerate(zip(_prompts(), reference))}
    llm.engine.runner = scripted_runner(llm.engine.runner, full, seed=k)
    outs = llm.generate(_prompts(), _params())
    assert [o.output_token_ids for o in outs] == reference
    stats = llm.engine.stats()
    assert stats.num_accepted_tokens > stats.num_draft_tokens // 4, stats
    assert stats.num_accepted_tokens < stats.num_draft_tokens, stats
