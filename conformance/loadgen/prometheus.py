"""Read counters from a Prometheus text exposition (what GET /metrics returns)."""

from __future__ import annotations

import math


def parse_samples(text: str) -> dict[str, float]:
    """{metric name: value summed over every label set}. Comment lines, malformed lines and values that
    are not finite (NaN, +Inf, 1e999: no counter of a live engine reads so) are skipped."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, _, rest = line.partition("{")
            rest = rest.rpartition("}")[2]
        else:
            name, _, rest = line.partition(" ")
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if not math.isfinite(value):
            continue
        out[name.strip()] = out.get(name.strip(), 0.0) + value
    return out
