"""Sampling parameters, vLLM's names: `SamplingParams(max_tokens, temperature, seed, top_k, top_p, ignore_eos)`.

temperature 0 is greedy. `seed` seeds the request's own generator (sampling and rejection
draws); without it the engine's seed and the request's arrival index are used, so runs repeat.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0
    seed: int | None = None
    top_k: int = 0               # 0: off (vLLM's -1 is accepted too)
    top_p: float = 1.0
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.max_tokens, int) or isinstance(self.max_tokens, bool) or self.max_tokens < 1:
            raise ValueError(f"max_tokens: must be an integer >= 1, got {self.max_tokens!r}")
        if not isinstance(self.temperature, (int, float)) or self.temperature < 0:
            raise ValueError(f"temperature: must be a number >= 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p: must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.top_k, int) or self.top_k < -1:
            raise ValueError(f"top_k: must be an integer >= -1, got {self.top_k!r}")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0
