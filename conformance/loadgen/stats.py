"""Medians and spreads of latency samples."""

from __future__ import annotations

import math
from typing import Sequence


def quantile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default `linear` method)."""
    if not values:
        raise ValueError("quantile of no values")
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def spread(values: Sequence[float], scale: float = 1.0) -> dict[str, float] | None:
    """{median, p10, p90, p99, num_samples} of `values` x `scale`, or None for no samples."""
    if not values:
        return None
    return {"median": quantile(values, 0.5) * scale, "p10": quantile(values, 0.1) * scale,
            "p90": quantile(values, 0.9) * scale, "p99": quantile(values, 0.99) * scale, "num_samples": len(values)}
