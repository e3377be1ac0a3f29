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
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conformance.checks.goldens import find_golden  # noqa: E402
from conformance.checks.intervals import FAIL, PASS, judge_ratio, ratio_interval  # noqa: E402
from conformance.checks.live_checks import bound_of, overruns  # noqa: E402
from conformance.checks.live_view import live_view, rungs_by_concurrency  # noqa: E402
from conformance.documents import units  # noqa: E402
from conformance.documents.cases import find_case  # noqa: E402
from conformance.report.live_tables import median_of  # noqa: E402


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
                judged = judge_ratio(ratio, 1.0, upper=lower_is_better)
                word = {PASS: "better", FAIL: "worse"}.get(judged, "tie")
                worse = worse or judged == FAIL
                cells.append(f"{ratio.text()} {word}")
            out.append(f"| {e} | {c} | " + " | ".join(cells) + f" | {'no' if worse else 'yes'} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("observations", type=Path)
    ap.add_argument("--golden", action="append", default=[], metavar="ENGINE:CASE")
    ap.add_argument("--oracle", default="vllm")
    ap.add_argument("--head-to-head", action="store_true", help="each engine's figures against the oracle's, judged against 1")
    args = ap.parse_args()
    docs = [json.loads(line) for line in args.observations.read_text().splitlines() if line.strip()]
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
    raise SystemExit(main())
