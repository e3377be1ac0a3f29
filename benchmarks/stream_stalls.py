"""Stalls in the token streams of a live run, per engine and rung, from the client's own chunk times.

    python benchmarks/stream_stalls.py RUN/observations.jsonl [--factor 1.6]

Each record of a rung (`throughput.rungs[].records[]`) keeps the arrival offset of every streamed chunk
(`chunk_offsets_us`, from the request's start). A gap between two chunks longer than `factor` x that
record's median gap is a stall, and what it takes beyond the median is its excess. Stalls of concurrent
streams that arrive within 2 ms of each other are one event (a server that stops stops every stream).

Printed per engine and rung: the stall events, the time some stream was open (the union of the
records' first-to-last chunk windows, wave by wave), one event per how many ms of it, and the excess as
a share of the streams' time: how smoothly each engine streams, and at c = 32 how long running streams
wait behind other requests' prompt steps. A figure, not a verdict: nothing here judges an engine.
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

EVENT_WINDOW_MS = 2.0


def stalls_of(records: list[dict], factor: float) -> dict:
    """{events, open_ms, excess_share} of one rung's records. Times are ms from each wave's start
    (`start_ms`), so events and open windows are counted wave by wave (`repeat`) and summed."""
    waves: dict[int, list[dict]] = {}
    for rec in records:
        offs = rec.get("chunk_offsets_us") or []
        if len(offs) >= 3 and rec.get("start_ms") is not None:
            waves.setdefault(rec.get("repeat", 0), []).append(rec)
    events, open_ms, excess_ms, streamed_ms = 0, 0.0, 0.0, 0.0
    for recs in waves.values():
        times, windows = [], []
        for rec in recs:
            offs, start = rec["chunk_offsets_us"], rec["start_ms"]
            gaps = [(b - a) / 1000 for a, b in zip(offs, offs[1:])]
            med = statistics.median(gaps)
            for i, g in enumerate(gaps):
                if g > factor * med:
                    times.append(start + offs[i + 1] / 1000)
                    excess_ms += g - med
            windows.append((start + offs[0] / 1000, start + offs[-1] / 1000))
            streamed_ms += (offs[-1] - offs[0]) / 1000
        last = None
        for t in sorted(times):
            if last is None or t - last > EVENT_WINDOW_MS:
                events += 1
            last = t
        end = None
        for a, b in sorted(windows):
            if end is None or a > end:
                open_ms, end = open_ms + (b - a), b
            elif b > end:
                open_ms, end = open_ms + (b - end), b
    return {"events": events, "open_ms": open_ms, "excess_share": excess_ms / streamed_ms if streamed_ms else None}


def table(docs: list[dict], factor: float) -> str:
    lines = ["| engine | c | stall events | streams open (ms) | one event per (ms) | excess share of streaming |",
             "| --- | --- | --- | --- | --- | --- |"]
    for doc in docs:
        for rung in (doc.get("throughput") or {}).get("rungs") or []:
            s = stalls_of(rung.get("records") or [], factor)
            per = f"{s['open_ms'] / s['events']:.1f}" if s["events"] else "-"
            share = f"{100 * s['excess_share']:.1f}%" if s["excess_share"] is not None else "-"
            lines.append(f"| {doc['engine']['name']} | {rung['concurrency']} | {s['events']} | {s['open_ms']:,.0f} | "
                         f"{per} | {share} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("observations", type=Path, help="a run's observations.jsonl (or its run directory)")
    ap.add_argument("--factor", type=float, default=1.6, help="a gap over this x the record's median is a stall")
    args = ap.parse_args()
    try:
        docs = read_observations(args.observations)
    except (ConformanceError, OSError) as exc:
        print(f"stream_stalls: cannot read {args.observations}: {exc}", file=sys.stderr)
        return 2
    print(table([d for d in docs if d.get("status") == "ok"], args.factor))
    return 0


if __name__ == "__main__":
    sys.exit(main())
