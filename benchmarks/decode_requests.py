"""Bring an engine to steady decode for a benchmark (not a test).

Contract: `to_decode(eng, concurrency, prompt_tokens, max_tokens, extra_steps)` adds `concurrency`
greedy requests of random prompts (seeded by the concurrency; ids unique within the engine),
steps until no request is waiting or prefilling, then `extra_steps` more steps (the first decode
steps compile kernels). The requests keep running; the caller aborts them when done.
"""

from __future__ import annotations

import random
import time

from engine_under_test.llm import SamplingParams


def to_decode(eng, concurrency: int, prompt_tokens: int, max_tokens: int, extra_steps: int) -> None:
    rng = random.Random(concurrency)
    for i in range(concurrency):
        eng.add_request(f"d{concurrency}-{i}-{time.perf_counter_ns()}", [rng.randrange(2, 1000) for _ in range(prompt_tokens)],
                        SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True))
    sched = eng.scheduler
    while sched.waiting or any(r.num_computed_tokens < r.num_prompt_tokens for r in sched.running):
        eng.step()
    for _ in range(extra_steps):
        eng.step()
