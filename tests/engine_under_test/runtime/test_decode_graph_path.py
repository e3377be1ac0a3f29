"""The fixed-shape decode path (the bodies CUDA graphs capture) computes what the eager runner
computes: on a CPU its bodies run eagerly (`enforce_eager=False`), so every piece of it but the
capture itself (buffer filling, padding to a captured size, attention through the device block
table, state rollback, context and query-block K/V) is checked here token for token.

Greedy speculative output on the fixed-shape path equals the eager non-speculative output, with
the real drafter and with scripted drafts (every accepted-prefix length 0..k); the fixed-shape
path ran for most steps (it is not silently skipped).
"""

from __future__ import annotations

import random

import pytest

from engine_under_test.llm import LLM, SamplingParams
from engine_under_test.runtime.decode_graphs import capture_sizes

PROMPT_LENGTHS = (5, 23, 70, 41, 12)
OUTPUT_LENGTHS = (17, 9, 24, 30, 3)


def _prompts():
    rng = random.Random(11)
    return [[rng.randrange(2, 1000) for _ in range(n)] for n in PROMPT_LENGTHS]


def _params():
    return [SamplingParams(max_tokens=n, temperature=0, ignore_eos=True) for n in OUTPUT_LENGTHS]


def _llm(target, draft=None, k=0, enforce_eager=True):
    spec = {"method": "dflash", "model": str(draft), "num_speculative_tokens": k} if draft else None
    return LLM(target, spec, max_num_seqs=4, max_model_len=256, max_num_batched_tokens=96,
               kv_cache_memory_bytes=12 * 2**20, enforce_eager=enforce_eager)


def _tokens(llm):
    return [o.output_token_ids for o in llm.generate(_prompts(), _params())]


class _Counting:
    """Counts the steps the fixed-shape path ran (wraps the engine's DecodeGraphs.execute)."""

    def __init__(self, llm):
        self.graphs = llm.engine.runner.graphs
        self.num_steps = 0
        inner = self.graphs.execute

        def execute(*args, **kw):
            self.num_steps += 1
            return inner(*args, **kw)
        self.graphs.execute = execute


@pytest.fixture(scope="module")
def reference(tiny_checkpoints):
    return _tokens(_llm(tiny_checkpoints[0]))


def test_capture_sizes_cover_max_num_seqs():
    assert capture_sizes(4) == (1, 2, 4)
    assert capture_sizes(5) == (1, 2, 4, 5)
    assert capture_sizes(48) == (1, 2, 4, 8, 16, 24, 32, 40, 48)


def test_fixed_shape_path_without_drafter_equals_eager(tiny_checkpoints, reference):
    llm = _llm(tiny_checkpoints[0], enforce_eager=False)
    counting = _Counting(llm)
    assert _tokens(llm) == reference
    assert counting.num_steps > 10


@pytest.mark.parametrize("k", [4, 8])
def test_fixed_shape_path_with_real_drafter_is_lossless(tiny_checkpoints, reference, k):
    target, draft = tiny_checkpoints
    llm = _llm(target, draft, k, enforce_eager=False)
    counting = _Counting(llm)
    assert _tokens(llm) == reference
    assert counting.num_steps > 5
    assert llm.engine.stats().num_draft_tokens > 0


@pytest.mark.parametrize("k", [4, 8])
def test_fixed_shape_path_accepting_drafts_is_lossless(tiny_checkpoints, reference, k, scripted_runner):
    target, draft = tiny_checkpoints
    llm = _llm(target, draft, k, enforce_eager=False)
    full = {str(i): p + r for i, (p, r) in enumerate(zip(_prompts(), reference))}
    llm.engine.runner = scripted_runner(llm.engine.runner, full, seed=k)
    counting = _Counting(llm)
    assert _tokens(llm) == reference
    stats = llm.engine.stats()
    assert counting.num_steps > 3
    assert stats.num_draft_tokens // 4 < stats.num_accepted_tokens < stats.num_draft_tokens, stats


class _Splits:
    """Counts the mixed steps the runner ran as two passes (wraps DecodeGraphs.split) and the
    decode rows their captured pass took."""

    def __init__(self, llm):
        graphs = llm.engine.runner.graphs
        self.num_steps = self.num_decode_rows = 0
        inner = graphs.split

        def split(reqs):
            decode, rest = inner(reqs)
            if decode:
                assert rest and {sr.req_id for sr in decode}.isdisjoint(sr.req_id for sr in rest)
                assert len(decode) + len(rest) == len(reqs)
                self.num_steps += 1
                self.num_decode_rows += len(decode)
            return decode, rest
        graphs.split = split


@pytest.mark.parametrize("k", [4, 8])
def test_mixed_steps_split_into_captured_decode_rows_and_eager_prompts_are_lossless(
        tiny_checkpoints, reference, k, scripted_runner):
    """Prompts arrive while others decode (max_num_seqs 4, a 96-token budget): mixed steps run
    their decode rows on the fixed-shape path and their prompt chunks eagerly, and every accepted
    prefix length still gives the non-speculative tokens."""
    target, draft = tiny_checkpoints
    llm = _llm(target, draft, k, enforce_eager=False)
    full = {str(i): p + r for i, (p, r) in enumerate(zip(_prompts(), reference))}
    llm.engine.runner = scripted_runner(llm.engine.runner, full, seed=k)
    splits = _Splits(llm)
    assert _tokens(llm) == reference
    stats = llm.engine.stats()
    assert splits.num_steps >= 2 and splits.num_decode_rows >= 2, vars(splits)
    assert stats.num_draft_tokens // 4 < stats.num_accepted_tokens < stats.num_draft_tokens, stats


def test_a_mixed_step_counts_its_captured_rows_spec_decode_stats(tiny_checkpoints):
    """The decode rows of a split step are counted in the step's drafts and accepted tokens as
    they are in a step run whole (the same totals as the eager engine)."""
    target, draft = tiny_checkpoints
    eager, split = _llm(target, draft, 4), _llm(target, draft, 4, enforce_eager=False)
    splits = _Splits(split)
    assert _tokens(split) == _tokens(eager)
    assert splits.num_steps >= 2
    a, b = eager.engine.stats(), split.engine.stats()
    assert (b.num_draft_tokens, b.num_accepted_tokens, b.num_accepted_tokens_per_pos) == \
        (a.num_draft_tokens, a.num_accepted_tokens, a.num_accepted_tokens_per_pos)
