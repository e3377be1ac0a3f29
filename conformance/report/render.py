"""Render a `RunReport` as ONE self-contained HTML file (inline CSS and SVG; no script, no network).

Contract: `render_html(report)` returns the page; `write_html(report, path)` writes it atomically.
Every value reaches the page through Jinja2 with autoescape on, or through `charts` (which escapes
its text itself): an engine's message is shown as text, never interpreted; bidi controls and NUL
bytes are made visible first (`report.text.neutralise`). The file is written atomically
(`report.atomic`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from conformance.checks.verdicts import BUDGET_FIELDS, NOT_UNDER_KV_BOUND
from conformance.report import charts, latency
from conformance.report.atomic import write_atomic
from conformance.report.families import FAMILIES
from conformance.report.live_tables import LIVE_ORACLES, live_section
from conformance.report.model import OUTCOMES, RunReport, cell_outcome, is_finding, outcome_counts
from conformance.report.palette import palette
from conformance.report.reading import expectations_view, matrix_cell, verdict_view
from conformance.report.text import neutralise

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
PER_SEQUENCE_FIELDS = ("attention_kv_bytes", "recurrent_state_bytes", "draft_kv_bytes", "state_slots")
POOL_FIELDS = ("num_blocks", "block_size_tokens", "page_size_bytes", "unified")


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(str(TEMPLATES_DIR)), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True, finalize=neutralise)
    env.filters["bytes"] = charts.human_bytes
    env.filters["tojson_pretty"] = lambda v: json.dumps(v, indent=2, sort_keys=True, default=str)
    env.globals["engine_colour"] = charts.engine_colour
    env.tests["link_url"] = lambda v: isinstance(v, str) and (v.startswith("https://") or v.startswith("http://"))
    return env


def _plain(v: Any) -> Any:
    return round(v, 3) if isinstance(v, float) else v


def baseline_engine(report: RunReport) -> str | None:
    """The engine other engines' cells are marked against: the run's first oracle, else its first engine."""
    engines = report.matrix_engines
    return next((e.name for e in engines if e.role == "oracle"), engines[0].name if engines else None)


def _compare_row(label: str, values: dict[str, Any], fmt=_plain, baseline: str | None = None) -> dict[str, Any]:
    """One table row: a cell per engine, marked where it differs from the baseline engine (else the first)."""
    present = {e: v for e, v in values.items() if v is not None}
    base_engine = baseline if baseline in present else next(iter(present), None)
    base = present.get(base_engine) if base_engine else None
    cells = []
    for engine, value in values.items():
        differs = value is not None and base_engine is not None and engine != base_engine and value != base
        cells.append({"engine": engine, "text": "—" if value is None else str(fmt(value)), "differs": differs})
    return {"label": label, "cells": cells, "differs": len({json.dumps(v) for v in present.values()}) > 1}


def _ok(obs: dict[str, Any] | None, section: str) -> dict[str, Any] | None:
    if obs is None or obs.get("status") != "ok":
        return None
    return obs.get(section)


def _ledger_bar(engine: str, memory: dict[str, Any], case_spec: dict[str, Any],
                is_oracle: bool = False) -> tuple[charts.LedgerBar, list[str]]:
    ledger = memory["ledger_bytes"]
    outside = set(memory["outside_bound"])
    all_in_scope = "gpu_memory_utilization" in case_spec.get("memory", {})
    in_scope = [c for c in ledger if all_in_scope or c not in NOT_UNDER_KV_BOUND or c in outside]
    segments = tuple((c, ledger[c] or 0) for c in in_scope if c not in outside)
    outs = tuple((c, ledger[c] or 0) for c in in_scope if c in outside)
    not_bounded = [f"{c} {charts.human_bytes(ledger[c])}" for c in ledger if c not in in_scope]
    return charts.LedgerBar(engine, memory["bound_bytes"], segments, outs, finding=is_oracle), not_bounded


SLOTS_FROM = "vllm"   # whose drafting slots per request the step chart charges every engine's steps with


def _charged_steps(traces, budgets: dict[str, Any]) -> tuple[list[tuple[str, list[int], str]], str]:
    """Each engine's steps charged with drafting slots: tokens + slots x requests, the slots vLLM's
    table reserves per request when vLLM planned the case (else the engine's own): what
    `trace.steps_within_budget` holds against the budget. None drawn where the slots are 0."""
    vllm_slots = (budgets.get(SLOTS_FROM) or {}).get("drafting_slots_per_request")
    out, notes = [], []
    for engine, steps in traces:
        own = (budgets.get(engine) or {}).get("drafting_slots_per_request")
        slots, whose = (vllm_slots, "vLLM's") if vllm_slots is not None else (own, "its own")
        notes.append(f"{engine}: {own if own is not None else '—'} drafting slots per request")
        if slots:
            out.append((engine, [s["total_num_scheduled_tokens"] + slots * s["num_scheduled_requests"] for s in steps],
                        f"{engine} + {whose} drafting slots ({slots}/request)"))
    return out, " · ".join(notes)


def _case_view(report: RunReport, case, colours: dict[str, str] | None = None) -> dict[str, Any]:
    engines = [e.name for e in report.matrix_engines]
    oracles = report.oracles
    obs = {e: report.observation(case.id, e) for e in engines}
    budgets = {e: _ok(o, "budget") for e, o in obs.items()}
    memories = {e: _ok(o, "memory") for e, o in obs.items()}
    base = baseline_engine(report)
    row = lambda label, values, fmt=_plain: _compare_row(label, values, fmt, base)  # noqa: E731
    budget_rows = [row(f, {e: (b or {}).get(f) for e, b in budgets.items()}) for f in BUDGET_FIELDS] \
        if any(budgets.values()) else []
    seat_rows = []
    if any(memories.values()):
        seat_rows += [row("max_concurrency", {e: (m or {}).get("max_concurrency") for e, m in memories.items()})]
        seat_rows += [row(f, {e: ((m or {}).get("per_sequence") or {}).get(f) for e, m in memories.items()},
                                   charts.human_bytes if f.endswith("_bytes") else _plain)
                      for f in PER_SEQUENCE_FIELDS]
        seat_rows += [row(f"pool.{f}", {e: ((m or {}).get("pool") or {}).get(f) for e, m in memories.items()})
                      for f in POOL_FIELDS]
        seat_rows += [row("bound_bytes", {e: (m or {}).get("bound_bytes") for e, m in memories.items()},
                                   charts.human_bytes)]
    bars, not_bounded = [], {}
    for e, m in memories.items():
        if m:
            bar, extra = _ledger_bar(e, m, case.spec, e in oracles)
            bars.append(bar)
            if extra:
                not_bounded[e] = extra
    raw_traces = [(e, o["trace"]["steps"]) for e, o in obs.items()
                  if o and o.get("status") == "ok" and (o.get("trace") or {}).get("steps")]
    traces = [(e, [s["total_num_scheduled_tokens"] for s in steps]) for e, steps in raw_traces]
    charged, slot_note = _charged_steps(raw_traces, budgets)
    budget_lines: dict[int, list[str]] = {}
    for e, _ in traces:
        limit = (budgets.get(e) or {}).get("max_num_scheduled_tokens")
        if limit is not None:
            budget_lines.setdefault(limit, []).append(e)
    rungs = [(e, [(r["concurrency"], r["output_tok_per_s"]) for r in o["throughput"]["rungs"]
                  if r.get("status") == "ok" and r.get("output_tok_per_s") is not None])
             for e, o in obs.items() if o and (o.get("throughput") or {}).get("rungs")]
    return {
        "case": case,
        "engines": engines,
        "cells": [{"engine": e, "outcome": cell_outcome(report, case.id, e), "obs": obs[e],
                   "verdicts": [verdict_view(v, report) for v in report.verdicts_of(case.id, e)]} for e in engines],
        "budget_rows": budget_rows,
        "seat_rows": seat_rows,
        "ledger_svg": charts.ledger_chart(bars) if bars else None,
        "findings_outside": [b.engine for b in bars if b.finding and b.outside],
        "not_bounded": not_bounded,
        "trace_svg": charts.trace_chart(traces, [(v, "budget " + "/".join(es)) for v, es in budget_lines.items()],
                                        colours, charged) if traces else None,
        "slot_note": slot_note,
        "trace_lengths": {e: len(v) for e, v in traces},
        "ladder_svg": charts.ladder_chart([r for r in rungs if r[1]], colours) if any(r[1] for r in rungs) else None,
        "percentile_svgs": _percentile_svgs(obs, colours),
        "live": live_section(obs, case.spec, {e.name: e.role for e in report.matrix_engines},
                             oracle_goldens={o: _live_golden(o, case.id) for o in LIVE_ORACLES} if case.spec.get("live")
                             else None),
    }


def _live_golden(oracle: str, case_id: str) -> dict[str, Any] | None:
    """The oracle's live golden of a case, for the live section's oracle column (None when there is none)."""
    from conformance.documents.golden_doc import GoldenFormatError
    from conformance.checks.goldens import find_golden

    try:
        return find_golden("live", oracle, case_id)
    except GoldenFormatError:
        return None


def _percentile_svgs(obs: dict[str, Any], colours: dict[str, str] | None = None) -> list[Markup]:
    """TTFT and TPOT p50 / p90 / p99 per rung, every engine with a ladder (see `latency`)."""
    ladders = {e: o["throughput"]["rungs"] for e, o in obs.items() if o and (o.get("throughput") or {}).get("rungs")}
    out = []
    for metric in latency.METRICS:
        series = [(f"{e} {p}", pts) for e, rungs in ladders.items()
                  for p, pts in latency.percentile_points(rungs, metric).items()]
        if series:
            is_open = any(r.get("mode") == "open" for rungs in ladders.values() for r in rungs)
            out.append(charts.percentile_chart(series, metric, "request rate (req/s)" if is_open else "concurrency",
                                               colours))
    return out


def kill_matrix(report: RunReport) -> dict[str, Any] | None:
    """Defects x checks, when the run includes engines whose files switch defects on: for each such
    engine, the checks it fails, on how many cases, and the first failing message of each."""
    defective = [e for e in report.matrix_engines if e.defects]
    if not defective:
        return None
    cells: dict[str, dict[str, list]] = {e.name: {} for e in defective}
    for v in report.verdicts:
        if v.failed and v.engine in cells:
            cells[v.engine].setdefault(v.check, []).append(v)
    checks = sorted({c for per in cells.values() for c in per})
    rows = [{"engine": e.name, "defects": ", ".join(e.defects),
             "cells": [{"check": c, "num_cases": len(cells[e.name].get(c, [])),
                        "first": (cells[e.name][c][0].case_id + ": " + cells[e.name][c][0].message)
                        if cells[e.name].get(c) else ""} for c in checks],
             "killed": bool(cells[e.name])} for e in defective]
    return {"checks": checks, "rows": rows}


def render_html(report: RunReport) -> str:
    template = _environment().get_template("report.html.j2")
    colours = palette([e.name for e in report.engines])
    matrix = [{"case": c, "cells": [matrix_cell(report, c.id, e.name) for e in report.matrix_engines]}
              for c in report.cases]
    return template.render(
        report=report, matrix=matrix, counts=outcome_counts(report), outcomes=OUTCOMES,
        cases=[_case_view(report, c, colours) for c in report.cases], colours=colours,
        num_failed_checks=sum(1 for v in report.verdicts if v.failed and not is_finding(v, report.oracles)),
        num_findings=sum(1 for v in report.verdicts if is_finding(v, report.oracles)),
        kills=kill_matrix(report), expectations=expectations_view(report),
        families=[f for f in FAMILIES], oracles=report.oracles,
    )


def write_html(report: RunReport, path: Path) -> Path:
    return write_atomic(Path(path), render_html(report).encode("utf-8", "backslashreplace"))
