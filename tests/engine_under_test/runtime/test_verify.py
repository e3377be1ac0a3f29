"""Verification rules: greedy, standard rejection sampling, synthetic and fixed acceptance."""

from __future__ import annotations

import random

import pytest
import torch

from engine_under_test.acceptance import AcceptanceModel
from engine_under_test.llm import LLM, SamplingParams
from engine_under_test.runtime.verify import verify

GREEDY = SamplingParams(max_tokens=1, temperature=0)


def _logits_with_argmax(tokens: list[int], vocab: int = 16) -> torch.Tensor:
    x = torch.randn(len(tokens), vocab, generator=torch.Generator().manual_seed(0))
    x[torch.arange(len(tokens)), torch.tensor(tokens)] = 10.0
    return x


def test_greedy_accepts_the_matching_prefix_then_corrects():
    logits = _logits_with_argmax([3, 4, 5, 6])                 # rows follow x, d1, d2, d3
    assert verify(logits, [3, 4, 9], GREEDY, None, None) == [3, 4, 5]
    assert verify(logits, [3, 4, 5], GREEDY, None, None) == [3, 4, 5, 6]   # bonus
    assert verify(logits, [7, 4, 5], GREEDY, None, None) == [3]
    assert verify(logits, [3, -1, -1], GREEDY, None, None) == [3, 4]       # padded slots are rejected


def test_fixed_accepts_exactly_n_drafts():
    logits = _logits_with_argmax([3, 4, 5, 6, 7])
    model = AcceptanceModel.from_spec({"mode": "fixed", "accepted_tokens": 2}, 4, seed=0)
    assert verify(logits, [11, 12, 13, 14], GREEDY, None, model) == [11, 12, 5]
    model = AcceptanceModel.from_spec({"mode": "fixed", "accepted_tokens": 9}, 4, seed=0)
    assert verify(logits, [11, 12, 13, 14], GREEDY, None, model) == [11, 12, 13, 14, 7]


@pytest.mark.parametrize("spec, k", [({"mode": "synthetic", "mean_acceptance_length": 3.5}, 8),
                                     ({"mode": "synthetic", "acceptance_rates": [0.9, 0.7, 0.5, 0.3]}, 4)])
def test_synthetic_mean_acceptance_length(spec, k):
    model = AcceptanceModel.from_spec(spec, k, seed=3)
    logits = _logits_with_argmax(list(range(k + 1)))
    lengths = [len(verify(logits, [15] * k, GREEDY, None, model)) for _ in range(4000)]
    if "acceptance_rates" in spec:
        expected = 1 + sum(spec["acceptance_rates"])            # unconditional rates: E[accepted] = sum
    else:
        expected = spec["mean_acceptance_length"]
    assert abs(sum(lengths) / len(lengths) - expected) < 0.05


def test_rejection_sampling_keeps_the_target_distribution():
    """P(first output token) equals the target's probabilities whatever the draft proposes."""
    vocab = 5
    target = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0], [0.0] * vocab])
    probs = torch.softmax(target[0], -1)
    params = SamplingParams(max_tokens=1, temperature=1.0)
    gen = torch.Generator().manual_seed(11)
    counts = torch.zeros(vocab)
    n = 20000
    for _ in range(n):
        counts[verify(target, [1], params, gen, None)[0]] += 1
    assert torch.allclose(counts / n, probs, atol=0.015), (counts / n, probs)


def test_engine_fixed_acceptance_outputs_n_plus_one_per_verify_step(tiny_checkpoints):
    target, draft = tiny_checkpoints
    llm = LLM(target, {"method": "dflash", "model": str(draft), "num_speculative_tokens": 4},
              max_num_seqs=2, max_model_len=128, max_num_batched_tokens=64, kv_cache_memory_bytes=8 * 2**20,
              acceptance={"mode": "fixed", "accepted_tokens": 2})
    eng = llm.engine
    rng = random.Random(1)
    eng.add_request("a", [rng.randrange(2, 1000) for _ in range(9)], SamplingParams(max_tokens=20, temperature=0, ignore_eos=True))
    per_step = []
    while eng.has_unfinished_requests():
        for out in eng.step():
            per_step.append(len(out.new_token_ids))
    assert per_step[0] == 1 and all(n == 3 for n in per_step[1:-1]) and sum(per_step) == 20, per_step
    s = eng.stats()
    assert s.num_accepted_tokens == 2 * (len(per_step) - 1)
