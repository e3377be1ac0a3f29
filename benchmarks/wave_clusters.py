"""The first-token groups of each wave of a live run's rung, and the TPOT of each group, from the client's records.

    python benchmarks/wave_clusters.py RUN/observations.jsonl [--concurrency 32] [--gap-ms 5]

A closed-loop wave sends its c requests together; an engine prefills them over one or more steps, so their
first tokens come in groups. A request's TPOT runs from its first token to its last ((last - first) /
(output tokens - 1), as `conformance/loadgen/record.py` `tpot_s`), so a group whose first tokens come early
and then waits behind the next groups' prompt steps has a higher TPOT than a group that starts after them.
When two groups hold about half the wave each, the wave's TPOT p50 lies between them.

Printed per engine and wave of each chosen rung: the groups (first tokens within `gap-ms` of the one
before are one group) as "N at FIRST - LAST ms (TPOT median of the group)", the wave's last token, and the
wave's TPOT p50. Times are ms from the wave's first request sent. A figure, not a verdict.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conformance.errors import ConformanceError  # noqa: E402
from conformance.run.rundir import read_observations  # noqa: E402


def _times(rec: dict) -> tuple[float, float, float] | None:
    """(first token ms, last token ms, TPOT ms) of one record, from its wave's start; None when it cannot say."""
    offs, n = rec.get("chunk_offsets_us") or [], rec.get("num_output_tokens") or 0
    if rec.get("error") or len(offs) < 2 or n < 2 or rec.get("start_ms") is None:
        return None
    first, last = rec["start_ms"] + offs[0] / 1000, rec["start_ms"] + offs[-1] / 1000
    return first, last, (last - first) / (n - 1)


def waves_of(records: list[dict], gap_ms: float) -> list[dict]:
    """Per wave (`repeat`), in order: {wave, groups: [{n, first_ms, last_first_ms, tpot_ms}], end_ms, tpot_p50_ms}.
    Each wave's times are from its earliest `start_ms`."""
    by_wave: dict[int, list[dict]] = {}
    for rec in records:
        by_wave.setdefault(rec.get("repeat", 0), []).append(rec)
    out = []
    for wave, recs in sorted(by_wave.items()):
        t0 = min(r["start_ms"] for r in recs if r.get("start_ms") is not None)
        rows = sorted(t for t in map(_times, recs) if t is not None)
        if not rows:
            continue
        groups: list[list[tuple[float, float, float]]] = [[rows[0]]]
        for row in rows[1:]:
            if row[0] - groups[-1][-1][0] > gap_ms:
                groups.append([])
            groups[-1].append(row)
        out.append({"wave": wave,
                    "groups": [{"n": len(g), "first_ms": g[0][0] - t0, "last_first_ms": g[-1][0] - t0,
                                "tpot_ms": statistics.median(t for _, _, t in g)} for g in groups],
                    "end_ms": max(last for _, last, _ in rows) - t0,
                    "tpot_p50_ms": statistics.median(t for _, _, t in rows)})
    return out


def table(docs: list[dict], concurrency: set[int] | None, gap_ms: float) -> str:
    lines = ["| engine | c | wave | first-token groups: N at ms (their TPOT median) | last token ms | TPOT p50 ms |",
             "| --- | --- | --- | --- | --- | --- |"]
    for doc in docs:
        for rung in (doc.get("throughput") or {}).get("rungs") or []:
            if concurrency and rung["concurrency"] not in concurrency:
                continue
            for w in waves_of(rung.get("records") or [], gap_ms):
                groups = " · ".join(
                    f"{g['n']} at {g['first_ms']:.0f}" + (f" - {g['last_first_ms']:.0f}" if g["n"] > 1 else "")
                    + f" ({g['tpot_ms']:.2f})" for g in w["groups"])
                lines.append(f"| {doc['engine']['name']} | {rung['concurrency']} | {w['wave']} | {groups} | "
                             f"{w['end_ms']:.0f} | {w['tpot_p50_ms']:.2f} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("observations", type=Path, help="a run's observations.jsonl (or its run directory)")
    ap.add_argument("--concurrency", type=int, action="append", help="a rung to show (repeatable; default 32)")
    ap.add_argument("--gap-ms", type=float, default=5.0, help="first tokens this close to the one before are one group")
    args = ap.parse_args()
    try:
        docs = read_observations(args.observations)
    except (ConformanceError, OSError) as exc:
        print(f"wave_clusters: cannot read {args.observations}: {exc}", file=sys.stderr)
        return 2
    print(table(docs, set(args.concurrency or [32]), args.gap_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
