"""Engines compared as ratios of figures measured in the same session (never across sessions)."""

from __future__ import annotations

from typing import Any


def throughput_ratios(obs: dict[str, Any], baseline: dict[str, Any]) -> dict[int, float | None]:
    """{concurrency: obs output_tok_per_s / baseline's} over the rungs both measured ok."""
    def by_c(o: dict[str, Any]) -> dict[int, float]:
        return {r["concurrency"]: r["output_tok_per_s"] for r in ((o.get("throughput") or {}).get("rungs") or [])
                if r["status"] == "ok" and r.get("output_tok_per_s")}

    a, b = by_c(obs), by_c(baseline)
    return {c: a[c] / b[c] if b[c] else None for c in sorted(set(a) & set(b))}
