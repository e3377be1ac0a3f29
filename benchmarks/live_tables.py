"""Markdown tables of live figures, for a results README: each engine's ladder beside the first oracle's
(median tok/s, TTFT and TPOT p50 over the measured waves, and the tok/s ratio with its 95% interval),
and the NVML footprint per phase against each engine's bound. Not a CI gate.

    python benchmarks/live_tables.py RUN_DIR/observations.jsonl [--golden ENGINE:CASE ...] [--oracle vllm]
                                     [--head-to-head]

`--head-to-head` adds, per rung of each engine measured beside the oracle, output tok/s, TTFT p50 and
TPOT p50 as ratios to the oracle's with their 95% intervals, each judged against 1 (as fast as the
oracle): `better` when the interval lies wholly on the good side, `worse` when wholly on the bad side,
`tie` when it holds 1; a rung is at least as good as the oracle's when none of its figures is `worse`
(a figure that either side did not measure counts against it).

`--golden` adds an engine's committed live golden of a case as a column (`<engine> (golden)`).

Several runs' observations (each with the oracle measured in the same run) print one run after another;
with `--across-runs` they print one head-to-head table instead, the run as the unit: per rung and figure,
each run's ratio to the oracle of that run, then their geometric mean and 95% interval over the runs
(`conformance/checks/intervals.py` `ratio_over_runs`), judged against 1 as above. What moves between runs
and machines (an engine's start, the host) then widens the interval, which one run's waves cannot show.

    python benchmarks/live_tables.py RUN_A/observations.jsonl RUN_B/observations.jsonl ... --across-runs
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conformance.checks.goldens import find_golden  # noqa: E402
from conformance.checks.intervals import FAIL, PASS, judge_ratio, ratio_interval, ratio_over_runs  # noqa: E402
from conformance.checks.live_checks import bound_of, overruns  # noqa: E402
from conformance.checks.live_view import live_view, rungs_by_concurrency  # noqa: E402
from conformance.documents import units  # noqa: E402
from conformance.documents.cases import find_case  # noqa: E402
from conformance.errors import ConformanceError  # noqa: E402
from conformance.report.live_tables import median_of  # noqa: E402
from conformance.run.rundir import read_observations  # noqa: E402


def tables(views: dict[str, dict], oracle: str, util: float | None) -> str:
    out = ["| engine | c | output tok/s | TTFT p50 ms | TPOT p50 ms | accept | tok/s ratio to " + oracle + " [95%] |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    base = rungs_by_concurrency(views[oracle]) if oracle in views else {}
    for e, v in views.items():
        for c, r in sorted(rungs_by_concurrency(v).items()):
            if r.get("status") != "ok":
                out.append(f"| {e} | {c} | {r.get('status')} | | | | |")
                continue
            ref = base.get(c)
            ratio = ratio_interval(r["output_tok_per_s"], ref["output_tok_per_s"]) if ref and e != oracle else None
            out.append(f"| {e} | {c} | {median_of(r['output_tok_per_s']):,.0f} | {median_of(r['ttft_ms_p50']):.1f} | "
                       f"{median_of(r['tpot_ms_p50']):.2f} | {r.get('mean_acceptance_length')} | "
                       f"{ratio.text() if ratio else '-'} |")
    if util:
        # the phases of every engine's ladder (not only the oracle's: a file may hold no oracle)
        phases = ["idle"] + [f"c={c}" for c in sorted({c for v in views.values() for c in rungs_by_concurrency(v)})]
        out += ["", "| engine | bound | " + " | ".join(phases) + " |", "| --- | --- | " + " | ".join(["---"] * len(phases)) + " |"]
        for e, v in views.items():
            bound, _ = bound_of(v, util)
            over = overruns(v, util)
            cells = []
            for p in phases:
                used = (v.get("footprint") or {}).get(p)
                cells.append("-" if used is None else units.human_bytes(used)
                             + (f" (+{units.human_bytes(over[p])})" if over.get(p) else ""))
            out.append(f"| {e} | {units.human_bytes(bound) if bound else '-'} | " + " | ".join(cells) + " |")
    return "\n".join(out)


# figure -> whether more is better (output tok/s) or less (the latencies)
HEAD_TO_HEAD = (("output_tok_per_s", "tok/s", False), ("ttft_ms_p50", "TTFT p50", True),
                ("tpot_ms_p50", "TPOT p50", True))


def _judged(ratio, lower_is_better: bool, text: str) -> tuple[str, str]:
    """A ratio's cell (`text` and better / tie / worse against 1) and its verdict (intervals.judge_ratio)."""
    judged = judge_ratio(ratio, 1.0, upper=lower_is_better)
    return f"{text} {({PASS: 'better', FAIL: 'worse'}.get(judged, 'tie'))}", judged


def head_to_head(views: dict[str, dict], oracle: str) -> str:
    """Each engine's rungs against the oracle's of the same concurrency (see the module doc)."""
    out = ["| engine | c | " + " | ".join(f"{label} ratio to {oracle} [95%]" for _, label, _ in HEAD_TO_HEAD)
           + " | at least as good |", "| --- | --- | " + " | ".join(["---"] * len(HEAD_TO_HEAD)) + " | --- |"]
    base = rungs_by_concurrency(views.get(oracle) or {})
    for e, v in views.items():
        if e == oracle:
            continue
        for c, r in sorted(rungs_by_concurrency(v).items()):
            ref = base.get(c)
            if r.get("status") != "ok" or not ref or ref.get("status") != "ok":
                out.append(f"| {e} | {c} | " + " | ".join(["-"] * len(HEAD_TO_HEAD)) + " | not compared |")
                continue
            cells, worse = [], False
            for key, _, lower_is_better in HEAD_TO_HEAD:
                ratio = ratio_interval(r[key], ref[key])
                if ratio is None:
                    cells.append("-")
                    worse = True
                    continue
                cell, judged = _judged(ratio, lower_is_better, ratio.text())
                worse = worse or judged == FAIL
                cells.append(cell)
            out.append(f"| {e} | {c} | " + " | ".join(cells) + f" | {'no' if worse else 'yes'} |")
    return "\n".join(out)


def across_runs(runs: list[dict[str, dict]], oracle: str) -> str:
    """Each engine's rungs against the oracle's, over several runs (see the module doc): `runs` holds one
    {engine: live view} per run. A rung counts the runs in which both it and the oracle's served ok."""
    out = ["| engine | c | runs | " + " | ".join(f"{label} ratio to {oracle} [95% over runs]" for _, label, _ in HEAD_TO_HEAD)
           + " | at least as good |", "| --- | --- | --- | " + " | ".join(["---"] * len(HEAD_TO_HEAD)) + " | --- |"]
    engines = [e for e in dict.fromkeys(e for views in runs for e in views) if e != oracle]
    for e in engines:
        per_rung: dict[int, dict[str, list[float]]] = {}
        for views in runs:
            base = rungs_by_concurrency(views.get(oracle) or {})
            for c, r in rungs_by_concurrency(views.get(e) or {}).items():
                ref = base.get(c)
                if r.get("status") != "ok" or not ref or ref.get("status") != "ok":
                    continue
                row = per_rung.setdefault(c, {key: [] for key, _, _ in HEAD_TO_HEAD})
                for key, _, _ in HEAD_TO_HEAD:
                    ratio = ratio_interval(r[key], ref[key])
                    row[key].append(ratio.ratio if ratio else None)
        for c, row in sorted(per_rung.items()):
            cells, worse = [], False
            for key, _, lower_is_better in HEAD_TO_HEAD:
                pooled = ratio_over_runs(row[key]) if None not in row[key] else None
                if pooled is None:
                    cells.append("-")
                    worse = True
                    continue
                text = pooled.text() if not math.isinf(pooled.hi) else f"{pooled.ratio:.3f} x (one run: no interval)"
                cell, judged = _judged(pooled, lower_is_better, text)
                worse = worse or judged == FAIL
                cells.append(cell)
            out.append(f"| {e} | {c} | {len(row[HEAD_TO_HEAD[0][0]])} | " + " | ".join(cells)
                       + f" | {'no' if worse else 'yes'} |")
    return "\n".join(out)


def _read(path: Path) -> list[dict]:
    try:
        docs = read_observations(path)
    except (ConformanceError, OSError) as exc:
        raise SystemExit(f"live_tables: cannot read {path}: {exc}")
    if not docs:
        raise SystemExit(f"live_tables: {path} holds no observation")
    return docs


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("observations", type=Path, nargs="+", help="a run's observations.jsonl or run directory (several: one run each)")
    ap.add_argument("--golden", action="append", default=[], metavar="ENGINE:CASE")
    ap.add_argument("--oracle", default="vllm")
    ap.add_argument("--head-to-head", action="store_true", help="each engine's figures against the oracle's, judged against 1")
    ap.add_argument("--across-runs", action="store_true",
                    help="one head-to-head table over all the runs given, the run as the unit (two runs or more)")
    args = ap.parse_args()
    if args.across_runs:
        if len(args.observations) < 2:
            ap.error("--across-runs needs the observations of two runs or more")
        runs = [{d["engine"]["name"]: live_view(d) for d in _read(p) if d.get("status") == "ok"} for p in args.observations]
        print(across_runs(runs, args.oracle))
        return 0
    for i, path in enumerate(args.observations):
        docs = _read(path)
        if len(args.observations) > 1:
            print(("\n" if i else "") + f"### {path}\n")
        views = {d["engine"]["name"]: live_view(d) for d in docs if d.get("status") == "ok"}
        case_id = docs[0]["case_id"]
        for ref in args.golden:
            engine, _, case = ref.partition(":")
            views[f"{engine} (golden)"] = live_view(find_golden("live", engine, case or case_id))
        util = (find_case(case_id).spec.get("memory") or {}).get("gpu_memory_utilization")
        print(tables(views, args.oracle, util))
        if args.head_to_head:
            print("\n" + head_to_head(views, args.oracle))
    return 0


if __name__ == "__main__":
    sys.exit(main())
