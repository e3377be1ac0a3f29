"""The report's live section of one case: the oracles' ladders (vLLM, SGLang) and every engine's side by
side, each with its ratio to each oracle and the interval, the footprint per phase against each
engine's bound, acceptance per position.

Contract: `live_section(observations, case_spec, roles, oracles=("vllm", "sglang"), oracle_goldens=...)`
takes the case's run observations by engine and returns None when none was served, else plain rows of
text cells for the template:

    ladder     one row per rung: per engine output tok/s (median of its waves), TTFT / TPOT p50, mean
               acceptance length, and its tok/s ratio to each oracle column with the 95% interval (an
               oracle's cell: its ratio to the first oracle, the two oracles beside each other)
    memory     one row per phase: per engine the NVML peak and whether it lies over its bound
               (gpu_memory_utilization x the CUDA runtime's total); an oracle's overrun is a finding
    acceptance per engine the acceptance rate at each draft position, averaged over rungs

An oracle not served in this run has its live golden's column instead (`<oracle> (golden)`), when
`oracle_goldens` holds one.
"""

from __future__ import annotations

import statistics
from typing import Any, Mapping

from conformance.checks.intervals import ratio_interval
from conformance.checks.live_checks import bound_of, overrun, overruns
from conformance.checks.live_view import live_view, rungs_by_concurrency
from conformance.documents import units


LIVE_ORACLES = ("vllm", "sglang")   # the live oracles, in the order of their columns (the first leads)


def median_of(xs: list[float | None]) -> float | None:
    """The median of the measured values (None when there is none)."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def live_section(observations: Mapping[str, dict[str, Any] | None], case_spec: Mapping[str, Any],
                 roles: Mapping[str, str | None], oracles: tuple[str, ...] = LIVE_ORACLES,
                 oracle_goldens: Mapping[str, dict[str, Any] | None] | None = None) -> dict[str, Any] | None:
    """See the module doc. `oracles` in order: the first is the one the memory allowance and the
    headline compare with."""
    served = {e: o for e, o in observations.items() if o and o.get("mode") == "run" and o.get("throughput")}
    if not served:
        return None
    views = {e: live_view(o) for e, o in served.items()}
    roles = dict(roles)
    columns: dict[str, str] = {}   # oracle -> its column (served, or its golden)
    goldens = {}
    for o in oracles:
        if o in views:
            columns[o] = o
        elif (oracle_goldens or {}).get(o) is not None:
            name = f"{o} (golden)"
            goldens[name] = live_view(oracle_goldens[o])
            roles[name] = "oracle"
            columns[o] = name
    views = {**goldens, **views}
    engines = sorted(views, key=lambda e: (roles.get(e) != "oracle", e not in columns.values(), list(views).index(e)))
    oracle = columns.get(oracles[0])
    base = views.get(oracle) if oracle else None
    concurrencies = sorted({c for v in views.values() for c in rungs_by_concurrency(v)})
    ladder = []
    for c in concurrencies:
        cells = []
        for e in engines:
            r = rungs_by_concurrency(views[e]).get(c)
            if not r or r.get("status") != "ok":
                cells.append({"engine": e, "text": (r or {}).get("status") or "-", "ratios": []})
                continue
            compare_with = [oracle] if e in columns.values() else list(columns.values())
            ratios = []
            for col in compare_with:
                ref = rungs_by_concurrency(views[col]).get(c) if col and col != e else None
                if ref and ref.get("status") == "ok":
                    interval = ratio_interval(r["output_tok_per_s"], ref["output_tok_per_s"])
                    if interval:
                        ratios.append({"oracle": col, "text": interval.text()})
            text = (f"{_num(median_of(r['output_tok_per_s']), '.1f')} tok/s · TTFT {_num(median_of(r['ttft_ms_p50']), '.1f')} ms"
                    f" · TPOT {_num(median_of(r['tpot_ms_p50']), '.2f')} ms · accept {_num(r.get('mean_acceptance_length'), '.2f')}")
            cells.append({"engine": e, "text": text, "ratios": ratios})
        ladder.append({"concurrency": c, "cells": cells})
    util = (case_spec.get("memory") or {}).get("gpu_memory_utilization")
    # per oracle column: its overrun at each phase, and at its worst (for a phase it did not measure)
    allowed = {col: (overruns(views[col], util), overrun(views[col], util)[0]) for col in columns.values()} if util else {}
    phases = list(dict.fromkeys(p for v in views.values() for p in (v.get("footprint") or {})))
    phases.sort(key=lambda p: (p != "idle", int(p[2:]) if p.startswith("c=") and p[2:].isdigit() else 0, p))
    memory = []
    for p in phases:
        cells = []
        for e in engines:
            used = (views[e].get("footprint") or {}).get(p)
            bound = bound_of(views[e], util)[0] if util else None
            over = used is not None and bound is not None and used > bound
            mark, bad = "", False
            if over and roles.get(e) == "oracle":
                mark = "finding: the oracle over its own bound"
            elif over:
                beyond = [col for col, (at, worst) in allowed.items() if used - bound > at.get(p, worst)]
                bad = not allowed or bool(beyond)
                mark = "over the bound" + (f", beyond the overrun of {' and '.join(beyond)}" if beyond
                                           else "" if bad else ", within the oracles' own overrun")
            cells.append({"engine": e, "text": units.human_bytes(used, none="-"), "mark": mark, "bad": bad})
        memory.append({"phase": p, "cells": cells})
    bounds = {}
    for e in engines:
        if util:
            b, how = bound_of(views[e], util)
            worst, phase, _ = overrun(views[e], util)
            bounds[e] = (f"{how} = {units.human_bytes(b)}" if b else "not measured") + \
                (f"; over by {units.human_bytes(worst)} at {phase}" if worst else "")
    acceptance = {}
    for e in engines:
        rows = [r.get("accepted_per_pos") for r in views[e].get("rungs") or [] if r.get("accepted_per_pos")]
        if rows:
            acceptance[e] = "[" + ", ".join(f"{sum(col) / len(col):.2f}" for col in zip(*rows)) + "]"
    return {"engines": engines, "oracle": oracle if base else None, "oracles": list(columns.values()),
            "ladder": ladder, "memory": memory, "bounds": bounds, "acceptance": acceptance}
