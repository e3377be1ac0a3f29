"""Accepted tokens per draft position, counted as vLLM 0.33 counts them
(`vllm/v1/spec_decode/metrics.py`, `SpecDecodingStats.observe_draft`): a verify that accepts n
of its k drafts adds 1 to positions 0 .. n - 1. So the k counts sum to num_accepted_tokens,
never increase with the position, and follow the acceptance schedule:

- fixed (n = 2 of k = 4): positions 0 and 1 count every verify, 2 and 3 none;
- synthetic per-position rates (1, 1, 0.5, 0): 0 and 1 every verify, 2 about half, 3 none;
- on every step path: the eager runner, the captured decode step (its bodies run eagerly on the
  CPU) and the pipelined one, whose accepted lengths (fixed, synthetic, or the real drafter
  judged) come from the device; there the counts equal the lengths each collected step read,
  less the rows of requests that finished while the step was in flight (dropped, as vLLM does).
Seeded tiny checkpoints (conftest.py), CPU, float32.
"""

from __future__ import annotations

import random

import pytest

from engine_under_test.llm import LLM, SamplingParams
from engine_under_test.runtime import step_bodies
from engine_under_test.runtime.decode_graphs import DecodeGraphs

K = 4
PROMPT_LENGTHS = (5, 23, 41)
OUTPUT_LENGTHS = (30, 25, 40)


def _llm(checkpoints, spec_extra: dict | None = None, **kw) -> LLM:
    target, draft = checkpoints
    spec = {"method": "dflash", "model": str(draft), "num_speculative_tokens": K, **(spec_extra or {})}
    return LLM(target, spec, max_num_seqs=4, max_model_len=192, max_num_batched_tokens=96,
               kv_cache_memory_bytes=12 * 2**20, device="cpu", dtype="float32", **kw)


def _run(llm: LLM):
    rng = random.Random(3)
    prompts = [[rng.randrange(2, 1000) for _ in range(n)] for n in PROMPT_LENGTHS]
    llm.generate(prompts, [SamplingParams(max_tokens=n, temperature=0, ignore_eos=True) for n in OUTPUT_LENGTHS])
    return llm.engine.stats()


def _verifies_with_drafts(stats) -> int:
    assert stats.num_draft_tokens % K == 0, stats   # far from max_model_len: every verify checks k drafts
    return stats.num_draft_tokens // K


PATHS = {"eager": {"enforce_eager": True}, "captured-step": {"enforce_eager": False},
         "pipelined": {"enforce_eager": False, "async_scheduling": True}}


@pytest.mark.parametrize("path", list(PATHS))
def test_fixed_acceptance_counts_the_first_n_positions(tiny_checkpoints, path):
    stats = _run(_llm(tiny_checkpoints, acceptance={"mode": "fixed", "accepted_tokens": 2}, **PATHS[path]))
    verifies = _verifies_with_drafts(stats)
    assert verifies > 10
    assert stats.num_accepted_tokens_per_pos == [verifies, verifies, 0, 0]
    assert sum(stats.num_accepted_tokens_per_pos) == stats.num_accepted_tokens


@pytest.mark.parametrize("path", list(PATHS))
def test_synthetic_rates_are_followed_per_position(tiny_checkpoints, path):
    llm = _llm(tiny_checkpoints, {"rejection_sample_method": "synthetic",
                                  "synthetic_acceptance_rates": [1.0, 1.0, 0.5, 0.0]}, **PATHS[path])
    stats = _run(llm)
    per_pos = stats.num_accepted_tokens_per_pos
    verifies = _verifies_with_drafts(stats)
    assert len(per_pos) == K and sum(per_pos) == stats.num_accepted_tokens
    assert per_pos[0] == per_pos[1] == verifies and per_pos[3] == 0, per_pos
    assert 0.2 * verifies < per_pos[2] < 0.8 * verifies, per_pos


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["one-sync", "pipelined"])
def test_device_verified_steps_count_what_they_read(tiny_checkpoints, monkeypatch, async_scheduling):
    """The one-sync step (and the pipelined one) reads accepted lengths from the device; a rule
    accepting argmax[:, 0] mod (k + 1) drafts stands in for the random drafter's misses."""
    seen: list[int] = []

    def rule(argmax, drafts):
        import torch

        return torch.where(drafts[:, 0] >= 0, argmax[:, 0] % (drafts.shape[1] + 1), 0)

    collect = DecodeGraphs.collect

    def recording(self, step, result):
        out = collect(self, step, result)
        finished = llm.engine.scheduler.requests       # before this step is applied: dropped rows
        seen.extend(m for sr, m in zip(step.reqs, step.rows.accepted.tolist())
                    if not finished[sr.req_id].status.is_finished)
        return out

    monkeypatch.setattr(step_bodies, "accepted_lengths", rule)
    monkeypatch.setattr(DecodeGraphs, "collect", recording)
    llm = _llm(tiny_checkpoints, enforce_eager=False, async_scheduling=async_scheduling)
    stats = _run(llm)
    if async_scheduling:
        assert llm.engine.runner.graphs.num_chained_steps > 0
    expected = [sum(1 for m in seen if m > i) for i in range(K)]
    assert stats.num_accepted_tokens_per_pos == expected
    assert sum(expected) == stats.num_accepted_tokens and expected[K - 1] > 0
