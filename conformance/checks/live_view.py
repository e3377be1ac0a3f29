"""The figures of a run observation that the live checks judge, and that a live golden keeps.

Contract: `live_view(doc)` takes a run observation, or a live golden (which carries the view under
`live`), and returns one shape for both, so an oracle measured in this run and an oracle's golden are
compared by the same code:

    rungs: [{concurrency, status,
             output_tok_per_s, ttft_ms_p50, tpot_ms_p50, itl_ms_p50   one sample per measured wave
             ttft_ms, tpot_ms, itl_ms, e2e_ms                         distributions over every request
                                                                      {median, p10, p90, p99, num_samples}
             mean_acceptance_length, mean_acceptance_length_repeats, accepted_per_pos, num_requests}]
    plan            the figures the engine printed when it started (manifest startup_regexes)
    plan_expected   the same figures from the engine's own plan of the case (None: not planned)
    footprint       {phase: peak device bytes of the engine's process tree}   phases: idle, c=N ...
    max_running_requests {phase: the most requests its gauge showed}
    device_total_bytes (NVML) and cuda_total_bytes (the CUDA runtime's total), memory_source
    hardware, environment (provenance: engine packages, host), deviations (from the oracle's
    defaults), workload, settings
"""

from __future__ import annotations

from typing import Any

DISTRIBUTIONS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
DISTRIBUTION_FIELDS = ("median", "p10", "p90", "p99", "num_samples")
WAVE_FIELDS = {"output_tok_per_s": "output_tok_per_s_repeats", "ttft_ms_p50": "ttft_ms_median_repeats",
               "tpot_ms_p50": "tpot_ms_median_repeats", "itl_ms_p50": "itl_ms_median_repeats"}


def _distribution(d: Any) -> dict[str, Any] | None:
    return {k: d.get(k) for k in DISTRIBUTION_FIELDS} if isinstance(d, dict) else None


def _rung(r: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"concurrency": r["concurrency"], "status": r.get("status")}
    for name, key in WAVE_FIELDS.items():
        out[name] = list(r.get(key) or [])
    for name in DISTRIBUTIONS:
        out[name] = _distribution(r.get(name))
    for name in ("mean_acceptance_length", "accepted_per_pos", "num_requests"):
        out[name] = r.get(name)
    out["mean_acceptance_length_repeats"] = list(r.get("mean_acceptance_length_repeats") or [])
    return out


def live_view(doc: dict[str, Any]) -> dict[str, Any]:
    if isinstance(doc.get("live"), dict) and "rungs" in doc["live"]:   # a live golden: already a view
        return doc["live"]
    t = doc.get("throughput") or {}
    live = t.get("live") or {}
    by_phase = live.get("by_phase") or {}
    prov = doc.get("provenance") or {}
    return {
        "rungs": [_rung(r) for r in t.get("rungs") or [] if r.get("mode", "closed") == "closed"],
        "plan": dict(t.get("plan") or {}),
        "plan_expected": t.get("plan_expected"),
        "footprint": {phase: s.get("peak_device_bytes") for phase, s in by_phase.items()},
        "max_running_requests": {phase: s.get("max_running_requests") for phase, s in by_phase.items()},
        "device_total_bytes": live.get("device_total_bytes"),
        "cuda_total_bytes": live.get("cuda_total_bytes"),
        "memory_source": live.get("source"),
        "hardware": (doc.get("device") or {}).get("hardware"),
        "environment": prov.get("environment"),
        "deviations": prov.get("deviations") or [],
        "workload": t.get("workload"),
        "settings": t.get("settings"),
    }


def rungs_by_concurrency(view: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {r["concurrency"]: r for r in view.get("rungs") or []}
