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


def parse_labelled(text: str, name: str, label: str) -> dict[str, float]:
    """{value of `label`: sample value} of metric `name`'s labelled samples (e.g. one per draft position).
    A sample without the label, or with a value that is not a finite number, is skipped."""
    out: dict[str, float] = {}
    needle = f'{label}="'
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith(name + "{"):
            continue
        labels, _, rest = line[len(name) + 1:].partition("}")
        start = labels.find(needle)
        if start < 0:
            continue
        key = labels[start + len(needle):].split('"', 1)[0]
        fields = rest.split()
        try:
            value = float(fields[0]) if fields else math.nan
        except ValueError:
            continue
        if math.isfinite(value):
            out[key] = out.get(key, 0.0) + value
    return out
