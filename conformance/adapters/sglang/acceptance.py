"""The acceptance model of the SGLang 0.5.23 plan trace: how many drafts each verify step accepts.

Contract: `Acceptance(case)` raises ValueError for a mode with no plan-mode trace (`model`: it
needs the real draft). `accepted_per_request(bs, num_drafts)` is one verify step's accepted
drafts for each of the batch's `bs` requests (each in 0..num_drafts; the bonus token comes on top):

    fixed n                        min(n, num_drafts) for every request
    synthetic acceptance_rates     per request, per position Bernoulli draws (unconditional rates
                                   p_i; a draft is accepted given the previous one with p_i / p_{i-1}),
                                   random.Random(workload.seed + 1)
    synthetic mean_acceptance_length
                                   SGLang's simulated acceptance (SGLANG_SIMULATE_ACC_LEN = the mean):
                                   `spec_utils.sample_simulated_acc_len(mean, SGLANG_SIMULATE_ACC_METHOD,
                                   num_drafts + 1)` draws one commit length in [1, num_drafts + 1] per verify
                                   step for the whole batch (SGLang fills accept_len for every row), and
                                   num_drafts accepted = length - 1; its torch draws run on a private CPU
                                   generator state seeded torch.manual_seed(workload.seed + 1), so the
                                   process-wide torch RNG is left as it was
"""

from __future__ import annotations

import random
from typing import Any

FUNCTIONS = ("sglang.srt.speculative.spec_utils.sample_simulated_acc_len",
             "sglang.srt.environ.envs.SGLANG_SIMULATE_ACC_METHOD")

GLUE = {"name": "conformance.adapters.sglang.acceptance.Acceptance",
        "description": "accepted drafts per verify step: fixed n; synthetic per-position rates as seeded Bernoulli "
                       "draws (random.Random(workload.seed + 1)); synthetic mean_acceptance_length through SGLang's "
                       "sample_simulated_acc_len (SGLANG_SIMULATE_ACC_LEN semantics: one commit length per verify "
                       "step for the batch, accepted = length - 1) on a private torch RNG state seeded "
                       "workload.seed + 1"}


class Acceptance:
    def __init__(self, case: dict[str, Any]):
        acc = case["acceptance"]
        seed = int(case["workload"]["seed"]) + 1
        self.mode = acc["mode"]
        self.mean_length: float | None = None
        if self.mode == "fixed":
            self.fixed = int(acc["accepted_tokens"])
        elif self.mode == "synthetic" and acc.get("acceptance_rates"):
            rates = list(acc["acceptance_rates"])
            self.rates = [p / q if q > 0.0 else 0.0 for p, q in zip(rates, [1.0, *rates[:-1]])]
            self.rng = random.Random(seed)
        elif self.mode == "synthetic" and "mean_acceptance_length" in acc:
            import torch

            from sglang.srt.environ import envs

            self.mean_length = float(acc["mean_acceptance_length"])
            self.method = str(envs.SGLANG_SIMULATE_ACC_METHOD.get())
            saved = torch.get_rng_state()
            torch.manual_seed(seed)
            self.torch_state = torch.get_rng_state()
            torch.set_rng_state(saved)
        elif self.mode == "synthetic":
            raise ValueError("synthetic acceptance needs acceptance.mean_acceptance_length or acceptance_rates")
        else:
            raise ValueError(f"acceptance mode {self.mode!r} has no plan-mode trace (it needs the real draft)")

    def accepted_per_request(self, bs: int, num_drafts: int) -> list[int]:
        if self.mode == "fixed":
            return [min(self.fixed, num_drafts)] * bs
        if self.mean_length is not None:
            return [self._simulated_length(num_drafts + 1) - 1] * bs
        return [self._bernoulli(num_drafts) for _ in range(bs)]

    def _bernoulli(self, num_drafts: int) -> int:
        n = 0
        while n < num_drafts and n < len(self.rates) and self.rng.random() < self.rates[n]:
            n += 1
        return n

    def _simulated_length(self, max_len: int) -> int:
        import torch

        from sglang.srt.speculative.spec_utils import sample_simulated_acc_len

        saved = torch.get_rng_state()
        torch.set_rng_state(self.torch_state)
        try:
            length = int(sample_simulated_acc_len(self.mean_length, self.method, max_len))
            self.torch_state = torch.get_rng_state()
        finally:
            torch.set_rng_state(saved)
        return length
