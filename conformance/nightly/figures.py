"""The figures of an observation that the history keeps, each with the samples one run gives and the
noise band a change must leave before it counts.

Contract: `figures_of(obs, case_spec)` yields `Figure(name, samples, limit, upper)`:

    live (run mode), per closed-loop rung c and per figure of the case's regression band
    (`documents.live_spec.Band.limits`, the band `live.golden` judges an engine against its own golden with):
        "c=<c> output tok/s" | "c=<c> TTFT p50" | "c=<c> TPOT p50" | "c=<c> ITL p50"
        samples: one per measured wave (`checks.live_view`), limit: the band's (0.6, 3, 2, 2 by default)
    plan (every ok observation): exact figures, one sample per run, limit 1 (any move is a change)
        memory.max_concurrency, budget.max_num_scheduled_tokens, budget.max_active_seqs,
        memory.per_sequence.{attention_kv,recurrent_state,draft_kv}_bytes, trace.num_steps

`upper`: whether the band's limit is an upper one (less is better: latencies) or a lower one (more is
better: tok/s). Figures that are absent, zero or not numbers are left out (the statistics take logs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from conformance.checks.live_view import live_view
from conformance.documents.live_spec import live_spec

PLAN_FIGURES = (("memory.max_concurrency", ("memory", "max_concurrency"), False),
                ("budget.max_num_scheduled_tokens", ("budget", "max_num_scheduled_tokens"), False),
                ("budget.max_active_seqs", ("budget", "max_active_seqs"), False),
                ("memory.per_sequence.attention_kv_bytes", ("memory", "per_sequence", "attention_kv_bytes"), True),
                ("memory.per_sequence.recurrent_state_bytes", ("memory", "per_sequence", "recurrent_state_bytes"), True),
                ("memory.per_sequence.draft_kv_bytes", ("memory", "per_sequence", "draft_kv_bytes"), True))


@dataclass(frozen=True)
class Figure:
    name: str
    samples: tuple[float, ...]
    limit: float          # the noise band's limit as a ratio to the earlier commits (1: exact figures)
    upper: bool           # True: less is better (the band's limit is an upper one)


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def _dig(doc: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc


def figures_of(obs: Mapping[str, Any], case_spec: Mapping[str, Any]) -> Iterator[Figure]:
    if obs.get("status") != "ok":
        return
    for name, path, upper in PLAN_FIGURES:
        value = _number(_dig(obs, path))
        if value is not None:
            yield Figure(name, (value,), 1.0, upper)
    steps = _dig(obs, ("trace", "steps"))
    if isinstance(steps, list) and steps:
        yield Figure("trace.num_steps", (float(len(steps)),), 1.0, True)
    spec = live_spec(case_spec)
    if spec is None or not (obs.get("throughput") or {}).get("rungs"):
        return
    for rung in live_view(dict(obs))["rungs"]:
        if rung.get("status") != "ok":
            continue
        for label, key, limit, upper in spec.regression.limits():
            samples = tuple(x for x in map(_number, rung.get(key) or []) if x is not None)
            if samples:
                yield Figure(f"c={rung['concurrency']} {label}", samples, limit, upper)
