"""Open-loop arrival schedules: when each request is due, as `vllm bench serve --request-rate` draws them.

Contract: `arrival_offsets_s(n, rate, ...)` is a pure function of its arguments: n non-decreasing
offsets in seconds from the start, the first at 0. `poisson` draws exponential gaps (a Poisson
process of `request_rate_per_s`); with `burstiness` != 1 the gaps are gamma(shape=burstiness,
scale=1 / (rate * burstiness)), vLLM's generalisation (burstiness < 1 is burstier, > 1 more
regular; the mean rate is the same). `constant` spaces them exactly 1 / rate apart.
"""

from __future__ import annotations

import random

ARRIVALS = ("poisson", "constant")


def arrival_offsets_s(num_requests: int, request_rate_per_s: float, arrival: str = "poisson",
                      burstiness: float = 1.0, seed: int = 0) -> list[float]:
    if arrival not in ARRIVALS:
        raise ValueError(f"arrival: must be one of {ARRIVALS}, got {arrival!r}")
    if not request_rate_per_s > 0:
        raise ValueError(f"request_rate_per_s: must be > 0, got {request_rate_per_s!r}")
    if not burstiness > 0:
        raise ValueError(f"burstiness: must be > 0, got {burstiness!r}")
    if arrival == "constant":
        return [i / request_rate_per_s for i in range(num_requests)]
    rng = random.Random(f"arrivals:{seed}")
    out, t = [], 0.0
    for i in range(num_requests):
        out.append(t)
        t += rng.gammavariate(burstiness, 1.0 / (request_rate_per_s * burstiness))
    return out
