"""The workload: which prompts, how long the outputs, all from the case's seed."""

from __future__ import annotations

import random
from dataclasses import dataclass

# Token ids below this are left out of generated prompts (bos / eos / pad live there).
FIRST_PROMPT_TOKEN_ID = 2


@dataclass(frozen=True)
class Workload:
    """Contract: `prompt_token_ids(tag, i)` is a pure function of (seed, tag, i): the same prompts
    for every engine in every session. `tag` separates rungs, repeats and warm-up so that no two
    measured requests share a prefix an engine could cache.

    With explicit `prompts` (token-id lists of `prompt_tokens` ids each: another tool's prompts,
    replayed so two load generators send the same ones) request i gets `prompts[i % len(prompts)]`
    whatever the tag, warm-up included: an engine with prefix caching would serve repeats from its
    cache, so replay against one without it.
    """

    num_requests: int
    prompt_tokens: int
    output_tokens: int
    seed: int
    vocab_size: int
    prompts: tuple[tuple[int, ...], ...] = ()

    def __post_init__(self) -> None:
        for name in ("num_requests", "prompt_tokens", "output_tokens", "vocab_size"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"workload.{name}: must be an integer >= 1, got {v!r}")
        if self.vocab_size <= FIRST_PROMPT_TOKEN_ID:
            raise ValueError(f"workload.vocab_size: must exceed {FIRST_PROMPT_TOKEN_ID}, got {self.vocab_size}")
        object.__setattr__(self, "prompts", tuple(tuple(p) for p in self.prompts))
        for i, p in enumerate(self.prompts):
            if len(p) != self.prompt_tokens or not all(isinstance(t, int) and 0 <= t < self.vocab_size for t in p):
                raise ValueError(f"workload.prompts[{i}]: must be {self.prompt_tokens} token ids in "
                                 f"[0, {self.vocab_size}), got {list(p)[:8]}...")

    @classmethod
    def from_case(cls, case_spec: dict, vocab_size: int) -> "Workload":
        w = case_spec["workload"]
        return cls(num_requests=int(w["num_requests"]), prompt_tokens=int(w["prompt_tokens"]),
                   output_tokens=int(w["output_tokens"]), seed=int(w["seed"]), vocab_size=int(vocab_size))

    def prompt_token_ids(self, tag: str, index: int) -> list[int]:
        if self.prompts:
            return list(self.prompts[index % len(self.prompts)])
        rng = random.Random(f"{self.seed}:{tag}:{index}")
        return [rng.randrange(FIRST_PROMPT_TOKEN_ID, self.vocab_size) for _ in range(self.prompt_tokens)]
