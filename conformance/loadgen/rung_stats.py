"""Figures of one measured wave of requests, computed from its records alone (so they can be recomputed).

Contract: `wave_figures(records, t0_s, ...)` is a pure function of the records. Throughput is over
the wave's wall time, from the common start `t0_s` to the last request's end. Open loop adds:
the requested rate, the schedule's own rate (a Poisson draw of n arrivals is off the requested
rate by ~1/sqrt(n)), the achieved send rate, the client's lag behind the schedule (lateness not
explained by waiting for a slot under the cap). Who is saturated: the `client` when its event
loops woke more than `MAX_LOOP_LAG_MS` late at p90 (either mode: its latencies then include its
own queueing), or, in open loop, when the achieved rate falls short of the schedule's by more than
`RATE_TOLERANCE` and the client's own lag explains it; the `concurrency_cap` (the server holds
every slot: the engine is the limit) when queueing for a slot explains the shortfall.
"""

from __future__ import annotations

from typing import Any, Sequence

from conformance.loadgen.record import RequestRecord
from conformance.loadgen.stats import spread

RATE_TOLERANCE = 0.02
MAX_LOOP_LAG_MS = 5.0


def _rate(times_s: Sequence[float]) -> float | None:
    ts = sorted(times_s)
    return (len(ts) - 1) / (ts[-1] - ts[0]) if len(ts) > 1 and ts[-1] > ts[0] else None


def meets_slo(r: RequestRecord, slo_ttft_ms: float | None, slo_tpot_ms: float | None) -> bool:
    if not r.ok:
        return False
    if slo_ttft_ms is not None and (r.ttft_s is None or r.ttft_s * 1e3 > slo_ttft_ms):
        return False
    tpot = r.tpot_s
    return not (slo_tpot_ms is not None and tpot is not None and tpot * 1e3 > slo_tpot_ms)


def wave_figures(records: Sequence[RequestRecord], t0_s: float, request_rate_per_s: float | None = None,
                 slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None,
                 loop_lag_s: Sequence[float] = ()) -> dict[str, Any]:
    ok = [r for r in records if r.ok]
    wall_s = max((r.end_s for r in records), default=t0_s) - t0_s
    out: dict[str, Any] = {
        "wall_s": wall_s,
        "output_tok_per_s": sum(r.num_output_tokens for r in ok) / wall_s if wall_s > 0 else None,
        "request_per_s": len(ok) / wall_s if wall_s > 0 else None,
        "goodput_request_per_s": None,
        "saturated": None,
    }
    lag_p90 = spread(loop_lag_s, 1e3)
    if lag_p90 and lag_p90["p90"] > MAX_LOOP_LAG_MS:
        out["saturated"] = "client"
    if (slo_ttft_ms is not None or slo_tpot_ms is not None) and wall_s > 0:
        out["goodput_request_per_s"] = sum(meets_slo(r, slo_ttft_ms, slo_tpot_ms) for r in records) / wall_s
    if request_rate_per_s is None:
        return out
    scheduled = _rate([r.scheduled_s for r in records if r.scheduled_s is not None])
    achieved = _rate([r.start_s for r in records])
    lag = spread([r.client_lag_s for r in records], 1e3)
    queued = spread([r.queued_s for r in records], 1e3)
    saturated = out["saturated"]
    if saturated is None and scheduled and achieved is not None and achieved < (1 - RATE_TOLERANCE) * scheduled:
        mean_queued = sum(r.queued_s for r in records) / len(records)
        mean_lag = sum(r.client_lag_s for r in records) / len(records)
        saturated = "concurrency_cap" if mean_queued >= mean_lag else "client"
    out.update(request_rate_per_s=request_rate_per_s, scheduled_request_per_s=scheduled,
               achieved_request_per_s=achieved, client_lag_ms=lag, queued_ms=queued, saturated=saturated)
    return out


def saturation_message(saturated: str | None, requested: float | None, achieved: float | None) -> str | None:
    if saturated is None:
        return None
    got = f"{achieved:.1f}" if achieved else "?"
    if requested is None or (saturated == "client" and achieved and achieved >= (1 - RATE_TOLERANCE) * requested):
        held = "" if requested is None else f"it sent {got} req/s of the {requested:g} asked, but "
        return (f"the client is saturated, not the engine: {held}its event loop woke over {MAX_LOOP_LAG_MS:g} ms "
                f"late (p90), so these latencies include the load generator's own queueing")
    if saturated == "client":
        return (f"the client is saturated, not the engine: it sent {got} req/s of the {requested:g} asked "
                f"(add client processes or cores; these figures measure the load generator)")
    return (f"the engine is saturated: every slot under the concurrency cap stayed busy, so requests "
            f"queued and {got} req/s of the {requested:g} asked were sent")
