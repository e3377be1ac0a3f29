"""Fixed and synthetic acceptance decided on the device (runtime/device_verify.py
`modeled_accepted_lengths`, `emitted_tokens`; acceptance.py `thresholds` / `draws`), checked
against the host's `AcceptanceModel` and `verify`, on CPU tensors.

- fixed n (0 .. k + 1) and synthetic rates of 0s and 1s (the minimum-variance schedule at an
  integer mean): the accepted length and the emitted tokens (accepted drafts as drafted, then
  the target's argmax at m) equal `verify` with the AcceptanceModel exactly, on random rows with
  padded tails (ids < 0), fully padded rows and rows with fewer drafts than k;
- the integer draw / threshold comparison is the float comparison u < c it stands for;
- fractional rates: over many device draws the mean accepted length, and the frequency of
  accepting each position, are within 5 standard deviations (computed from the model's own
  distribution) of the model's; and rows never accept past their drafts.
"""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
import torch

from engine_under_test.acceptance import DRAW_SCALE, AcceptanceModel
from engine_under_test.runtime.device_verify import emitted_tokens, modeled_accepted_lengths
from engine_under_test.runtime.verify import verify
from engine_under_test.sampling_params import SamplingParams

GREEDY = SamplingParams(max_tokens=1, temperature=0)
VOCAB = 50


def _rows(rng: random.Random, k: int, n: int):
    """n rows: argmax [k + 1], drafts [k] with padded tails, some fully padded."""
    argmax, drafts = [], []
    for _ in range(n):
        argmax.append([rng.randrange(VOCAB) for _ in range(k + 1)])
        d = [rng.randrange(VOCAB) for _ in range(k)]
        r = rng.random()
        if r < 0.3:
            cut = rng.randrange(k + 1)
            d = d[:cut] + [-1] * (k - cut)
        elif r < 0.4:
            d = [-1] * k
        drafts.append(d)
    return argmax, drafts


def _device(model: AcceptanceModel, argmax, drafts, k: int):
    a, d = torch.tensor(argmax), torch.tensor(drafts)
    draws = torch.from_numpy(model.draws(len(drafts), k))
    m = modeled_accepted_lengths(d, draws, torch.tensor(model.thresholds(k)))
    return m, emitted_tokens(a, d, m)


DETERMINISTIC = [({"mode": "fixed", "accepted_tokens": n}, k) for k in (1, 4, 8) for n in range(k + 2)] + \
    [({"mode": "synthetic", "mean_acceptance_length": float(x)}, k) for k in (1, 4, 8) for x in range(1, k + 2)] + \
    [({"mode": "synthetic", "acceptance_rates": [1.0, 1.0, 0.0, 0.0]}, 4)]


@pytest.mark.parametrize("spec, k", DETERMINISTIC)
def test_fixed_and_zero_one_rates_equal_the_host_verify(spec, k):
    device_model = AcceptanceModel.from_spec(spec, k, seed=1)
    host_model = AcceptanceModel.from_spec(spec, k, seed=2)
    assert not device_model.needs_draws(k)
    rng = random.Random(k * 100 + len(str(spec)))
    argmax, drafts = _rows(rng, k, 300)
    m, emitted = _device(device_model, argmax, drafts, k)
    for b, (a, d) in enumerate(zip(argmax, drafts)):
        expected = verify(torch.zeros(k + 1, VOCAB), d, GREEDY, None, host_model, argmax=a)
        assert int(m[b]) == len(expected) - 1, (a, d)
        assert emitted[b, :int(m[b]) + 1].tolist() == expected, (a, d)
        num_valid = next((j for j, x in enumerate(d) if x < 0), k)
        assert int(m[b]) <= num_valid                 # padded slots never count
    model_length = len(list(itertools.takewhile(lambda t: t == DRAW_SCALE, device_model.thresholds(k))))
    assert int(m.max()) == model_length               # a row with all k drafts reaches the model's length


def test_emitted_tokens_are_the_drafts_then_the_argmax():
    argmax = torch.tensor([[10, 11, 12, 13], [20, 21, 22, 23], [30, 31, 32, 33]])
    drafts = torch.tensor([[1, 2, 3], [4, 5, -1], [7, 8, 9]])
    m = torch.tensor([0, 2, 3])
    out = emitted_tokens(argmax, drafts, m)
    assert out[0, :1].tolist() == [10]
    assert out[1, :3].tolist() == [4, 5, 22]
    assert out[2].tolist() == [7, 8, 9, 33]


def test_integer_draws_compare_as_the_uniforms_they_stand_for():
    rng = random.Random(3)
    cases = [(rng.random(), rng.random()) for _ in range(5000)]
    cases += [(u, u) for u, _ in cases[:200]] + [(0.0, 0.0), (0.0, 1e-300), (1 - 2 ** -53, 1.0), (0.5, 0.5 + 2 ** -53)]
    for u, c in cases:
        model = AcceptanceModel("synthetic", rates=[c])
        draw = int(u * DRAW_SCALE)                    # exact: random.random() is on the 2^-53 grid
        assert draw / DRAW_SCALE == u
        assert (draw < model.thresholds(1)[0]) == (u < c), (u, c)


def test_draws_cover_the_grid_and_are_skipped_when_they_cannot_matter():
    model = AcceptanceModel.from_spec({"mode": "synthetic", "mean_acceptance_length": 2.5}, 4, seed=0)
    assert model.needs_draws(4)
    d = model.draws(1000, 4)
    assert d.shape == (1000, 4) and d.dtype == np.int64 and 0 <= d.min() and d.max() < DRAW_SCALE
    assert abs(d.mean() / DRAW_SCALE - 0.5) < 0.02
    assert not np.array_equal(d, model.draws(1000, 4))   # a stream, not one draw reused
    fixed = AcceptanceModel.from_spec({"mode": "fixed", "accepted_tokens": 2}, 4, seed=0)
    assert not fixed.needs_draws(4) and not fixed.draws(3, 4).any()


@pytest.mark.parametrize("rates", [[1.0, 0.8, 0.5, 0.5, 0.2, 0.1, 0.0, 0.0], [0.6] * 8,
                                   "length:4.5", "length:1.3"])
def test_fractional_rates_follow_the_model_in_distribution(rates):
    k, n = 8, 20000
    spec = ({"mode": "synthetic", "mean_acceptance_length": float(rates.split(":")[1])} if isinstance(rates, str)
            else {"mode": "synthetic", "acceptance_rates": rates})
    model = AcceptanceModel.from_spec(spec, k, seed=7)
    assert model.needs_draws(k)
    # the model's unconditional rates p_i = P(m > i) and the moments of m
    p, q = [], 1.0
    for c in model.rates:
        q *= min(max(c, 0.0), 1.0)
        p.append(q)
    mean = sum(p)
    var = sum((2 * i + 1) * pi for i, pi in enumerate(p)) - mean ** 2
    drafts = torch.ones(n, k, dtype=torch.long)
    m, _ = _device(model, torch.zeros(n, k + 1, dtype=torch.long).tolist(), drafts.tolist(), k)
    assert abs(float(m.double().mean()) - mean) <= 5 * math.sqrt(var / n) + 1e-12, (float(m.double().mean()), mean)
    for i, pi in enumerate(p):
        freq = float((m > i).double().mean())
        assert abs(freq - pi) <= 5 * math.sqrt(pi * (1 - pi) / n) + 1e-12, (i, freq, pi)
    # the host model's loop, same distribution (another stream): the means agree within the two spreads
    host = [model.accepted(k) for _ in range(n)]
    assert abs(sum(host) / n - float(m.double().mean())) <= 5 * math.sqrt(2 * var / n) + 1e-12
    # capped rows: 3 drafts then padding never accept past 3
    capped = torch.tensor([[5, 5, 5] + [-1] * (k - 3)] * n)
    mc = modeled_accepted_lengths(capped, torch.from_numpy(model.draws(n, k)), torch.tensor(model.thresholds(k)))
    assert int(mc.max()) <= 3 and float((mc == min(3, k)).double().mean()) == pytest.approx(p[2], abs=0.02)
