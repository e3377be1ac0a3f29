"""Acceptance models for plan-mode and synthetic runs: how many drafts a verify step accepts.

Contract: `AcceptanceModel.from_spec(acceptance, k, seed)`; `.accepted(num_drafts)` -> int in
[0, num_drafts]. `fixed`: min(n, num_drafts). `synthetic`: per-position unconditional rates
(given, or from a mean acceptance length by the minimum-variance schedule: 1.0 for the whole
drafts, the fraction next, zeros after, as vLLM 0.33's synthetic rejection sampler), turned
into conditional rates c_i = p_i / p_(i-1) and drawn as an early-terminating Bernoulli loop
with random.Random(seed). `model`: the real drafter decides; it has no plan-mode model and
`from_spec` raises ValueError saying so.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any


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
            return cls(mode, rates=conditional_rates(rates), rng=random.Random(seed))
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
