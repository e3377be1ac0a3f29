"""Acceptance models for plan-mode and synthetic runs: how many drafts a verify step accepts.

Contract: `AcceptanceModel.from_spec(acceptance, k, seed)`; `.accepted(num_drafts)` -> int in
[0, num_drafts]. `fixed`: min(n, num_drafts). `synthetic`: per-position unconditional rates
(given, or from a mean acceptance length by the minimum-variance schedule: 1.0 for the whole
drafts, the fraction next, zeros after, as vLLM 0.33's synthetic rejection sampler), turned
into conditional rates c_i = p_i / p_(i-1) and drawn as an early-terminating Bernoulli loop
with random.Random(seed). `model`: the real drafter decides; it has no plan-mode model and
`from_spec` raises ValueError saying so.

On the device (runtime/device_verify.py `modeled_accepted_lengths`, the one-sync and pipelined
decode step) the same model is one comparison per draft position: `thresholds(k)` [k] and
`draws(num_seqs, k)` [num_seqs, k] are integers on a 2^-53 grid (DRAW_SCALE), draft j is accepted
while draw_j < threshold_j, and the accepted length is the leading run. A draw d stands for
u = d / 2^53, random.random()'s grid, and threshold_j = ceil(c_j 2^53), so d < threshold_j exactly
when u < c_j: the early-terminating Bernoulli loop above with k uniforms drawn up front (those
past the first rejection are never looked at). `fixed` is the thresholds 2^53 for j < n, 0
after. With every threshold 0 or 2^53 (fixed; synthetic rates all 0 or 1, the minimum-variance
schedule at an integer mean) the draws do not matter and the device gives exactly `accepted`'s
lengths; with fractional rates it is the same distribution from another random stream
(`draws` uses a numpy generator seeded from `seed`, not `rng`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DRAW_SCALE = 2 ** 53   # device draws are integers in [0, DRAW_SCALE): u = draw / DRAW_SCALE


def length_to_rates(mean_acceptance_length: float, k: int) -> list[float]:
    if not 1.0 <= mean_acceptance_length <= k + 1:
        raise ValueError(f"acceptance.mean_acceptance_length: must be in [1, {k + 1}] at k={k}, got {mean_acceptance_length}")
    drafts = mean_acceptance_length - 1
    full = int(drafts)
    return ([1.0] * full + [drafts - full] + [0.0] * (k - full - 1))[:k]


def conditional_rates(rates: list[float]) -> list[float]:
    return [p / q if q > 0.0 else 0.0 for p, q in zip(rates, [1.0, *rates[:-1]])]


@dataclass
class AcceptanceModel:
    mode: str
    fixed_accepted: int = 0
    rates: list[float] = field(default_factory=list)
    rng: random.Random | None = None
    draw_rng: np.random.Generator | None = None   # the device path's draws (`draws`)

    @classmethod
    def from_spec(cls, acceptance: dict[str, Any], k: int, seed: int) -> AcceptanceModel:
        mode = acceptance["mode"]
        if mode == "fixed":
            return cls(mode, fixed_accepted=int(acceptance["accepted_tokens"]))
        if mode == "synthetic":
            if "acceptance_rates" in acceptance:
                rates = [float(r) for r in acceptance["acceptance_rates"]]
                if len(rates) != k:
                    raise ValueError(f"acceptance.acceptance_rates: needs {k} entries (k), got {len(rates)}")
                if any(rates[i] > rates[i - 1] for i in range(1, k)):
                    raise ValueError(f"acceptance.acceptance_rates: must be non-increasing, got {rates}")
            else:
                rates = length_to_rates(float(acceptance["mean_acceptance_length"]), k)
            return cls(mode, rates=conditional_rates(rates), rng=random.Random(seed),
                       draw_rng=np.random.default_rng(seed))
        if mode == "model":
            raise ValueError("acceptance.mode: 'model' needs the real drafter; plan mode has no model to run "
                             "(use fixed or synthetic, or run mode)")
        raise ValueError(f"acceptance.mode: unknown {mode!r}")

    def accepted(self, num_drafts: int) -> int:
        if self.mode == "fixed":
            return min(self.fixed_accepted, num_drafts)
        n = 0
        while n < num_drafts and n < len(self.rates) and self.rng.random() < self.rates[n]:
            n += 1
        return n

    def thresholds(self, k: int) -> list[int]:
        """Per draft position j < k, the integer t_j such that a device draw d (`draws`) accepts
        draft j exactly when d < t_j: ceil(c_j * 2^53) (0 past the model's rates); `fixed`:
        2^53 (always) for j < n, 0 (never) after."""
        if self.mode == "fixed":
            return [DRAW_SCALE if j < self.fixed_accepted else 0 for j in range(k)]
        return [math.ceil(self.rates[j] * DRAW_SCALE) if j < len(self.rates) else 0 for j in range(k)]

    def needs_draws(self, k: int) -> bool:
        """Whether `draws` can change a device decision: some threshold strictly inside (0, 2^53)."""
        return any(0 < t < DRAW_SCALE for t in self.thresholds(k))

    def draws(self, num_seqs: int, k: int) -> np.ndarray:
        """[num_seqs, k] int64 uniform in [0, 2^53), one per draft position of every sequence of a
        device step (zeros when `needs_draws` is false: nothing is drawn)."""
        if self.draw_rng is None or not self.needs_draws(k):
            return np.zeros((num_seqs, k), dtype=np.int64)
        return self.draw_rng.integers(0, DRAW_SCALE, size=(num_seqs, k), dtype=np.int64)
