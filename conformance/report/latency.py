"""Latency percentiles per rung of a throughput ladder, for the report's percentile charts.

Contract: `percentile_points(rungs, metric)` gives {"p50" | "p90" | "p99": [(x, ms), ...]} over the
rungs that are ok, x being the rung's concurrency (closed loop) or request rate (open loop). The
percentiles are recomputed from the rung's per-request `records` when it kept them (TTFT from
`ttft_ms`, TPOT as (last chunk - TTFT) / (output tokens - 1), as `RequestRecord.tpot_s`), else read from the rung's summary
(`median`, `p90`, `p99` where present).
"""

from __future__ import annotations

from typing import Any, Sequence

from conformance.loadgen.stats import quantile

PERCENTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
METRICS = ("ttft_ms", "tpot_ms")


def _samples(rung: dict[str, Any], metric: str) -> list[float]:
    out = []
    for d in rung.get("records") or []:
        if d.get("error") is not None or d.get("ttft_ms") is None:
            continue
        if metric == "ttft_ms":
            out.append(d["ttft_ms"])
        elif d["num_output_tokens"] > 1 and d["chunk_offsets_us"]:
            out.append((d["chunk_offsets_us"][-1] / 1e3 - d["ttft_ms"]) / (d["num_output_tokens"] - 1))
    return out


def rung_x(rung: dict[str, Any]) -> float:
    return float(rung["request_rate_per_s"] if rung.get("mode") == "open" else rung["concurrency"])


def percentile_points(rungs: Sequence[dict[str, Any]], metric: str) -> dict[str, list[tuple[float, float]]]:
    if metric not in METRICS:
        raise ValueError(f"metric: one of {METRICS}, got {metric!r}")
    out: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in PERCENTILES}
    for r in rungs:
        if r.get("status") != "ok":
            continue
        xs = _samples(r, metric)
        summary = r.get(metric) or {}
        for name, q in PERCENTILES:
            if xs:
                out[name].append((rung_x(r), quantile(xs, q)))
            elif summary.get("median" if name == "p50" else name) is not None:
                out[name].append((rung_x(r), float(summary["median" if name == "p50" else name])))
    return {k: v for k, v in out.items() if v}
