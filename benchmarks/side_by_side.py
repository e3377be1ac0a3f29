"""Two load generators against one server, in alternating rounds: the figures, their ratios, the wire's view.

Contract: `compare_point(emit, point)` runs `point.rounds` rounds, each one run of both clients
(vLLM first in even rounds, ours first in odd ones, so drift cancels), and prints one table row:
the median over rounds of each client's TTFT, TPOT, ITL, E2EL medians and output tokens/s, and the
median over rounds of each round's ours/vLLM ratio (`METRICS`), then detail lines: every round's
TTFT and TPOT ratios, output tokens per run, the largest gap between vLLM's medians and this
project's statistics on vLLM's per-request timings, the engine's work per client (`engine_work`:
counters and CPU seconds, differenced around each run), and the host's load average.

With `capture_port` each run is also watched on the wire (`loopback_capture`): TTFT from the POST
segment to the first chunk with choices, TPOT from the first to the last, for the run's last
`num_requests` requests (the measured ones: warm-ups come first). Printed: how far each client's
medians sit above the wire's (its own latency: what it adds to what the server did), and the ratio
of the wire medians of ours' requests to vLLM's (did the server serve the two workloads alike).

With `together` a round is one run of both clients at once against the same server (each its
own copy of the workload, started together): whatever the server's speed does during a round,
both clients' requests see it, so each round's ratio compares the clients alone. No wire capture
and no engine counters there (the two clients' requests are not told apart on the server).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from benchmarks.loopback_capture import LoopbackCapture, WireRequest, turnarounds_s

METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms", "output_tok_per_s")
HEADS = ("TTFT ms", "TPOT ms", "ITL ms", "E2EL ms", "out tok/s")
CLIENTS = ("vllm", "ours")


class Printer:
    """Print and keep every line, for a results file."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str = "") -> None:
        print(line, flush=True)
        self.lines.append(line)


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def header(emit: Printer) -> None:
    emit(f"{'server':<12} {'c|r':>3} " + " ".join(f"{h:>9} {'vllm':>9} {'ratio':>6}" for h in HEADS))
    emit(f"{'':<16} " + " ".join(f"{'ours':>9} {'':>9} {'o/v':>6}" for _ in HEADS))


@dataclass
class Point:
    label: str
    load: str                                          # "4" (closed loop, c) or "2/s" (open loop, rate)
    rounds: int
    num_requests: int
    output_tokens: int
    run: dict[str, Callable[[], dict]]                 # "vllm" / "ours" -> figures of one run
    engine_work: Callable[[], dict] | None = None      # counters to difference around each run
    capture_port: int | None = None
    capture_cpu: int | None = None
    together: Callable[[], dict[str, dict]] | None = None   # one run of both at once -> {"vllm": .., "ours": ..}

    @property
    def closed_loop(self) -> bool:
        return not self.load.endswith("/s")


def wire_figures(reqs: list[WireRequest], num_requests: int, output_tokens: int) -> dict[str, float]:
    measured = [r for r in reqs if r.chunk_s][-num_requests:]
    turnarounds = turnarounds_s(reqs, measured)
    return {"wire_ttft_ms": statistics.median(r.ttft_s for r in measured) * 1e3,
            "wire_tpot_ms": statistics.median(r.tpot_s(output_tokens) for r in measured) * 1e3,
            "wire_turnaround_ms": statistics.median(turnarounds) * 1e3 if turnarounds else float("nan")}


def _one_run(p: Point, who: str) -> tuple[dict, dict | None]:
    before = p.engine_work() if p.engine_work else None
    if p.capture_port is None:
        figures = p.run[who]()
    else:
        with LoopbackCapture(p.capture_port, p.capture_cpu) as cap:
            figures = p.run[who]()
        figures.update(wire_figures(cap.requests(), p.num_requests, p.output_tokens))
    if before is None:
        return figures, None
    after = p.engine_work()
    return figures, {k: after[k] - before[k] for k in after}


def _median(xs) -> float:
    return statistics.median(list(xs))


def compare_point(emit: Printer, p: Point) -> None:
    load_before = load_average()
    got: dict[str, list[dict]] = {who: [] for who in CLIENTS}
    work: dict[str, list[dict]] = {who: [] for who in CLIENTS}
    for i in range(p.rounds):
        if p.together is not None:
            both = p.together()
            for who in CLIENTS:
                got[who].append(both[who])
            continue
        for who in (CLIENTS if i % 2 == 0 else CLIENTS[::-1]):
            figures, w = _one_run(p, who)
            got[who].append(figures)
            if w is not None:
                work[who].append(w)
    med = {who: {m: _median(f[m] for f in got[who]) for m in METRICS} for who in CLIENTS}
    ratios = {m: [o[m] / v[m] for o, v in zip(got["ours"], got["vllm"])] for m in METRICS}
    emit(f"{p.label:<12} {p.load:>3} " + " ".join(
        f"{med['ours'][m]:>9.2f} {med['vllm'][m]:>9.2f} {_median(ratios[m]):>6.3f}" for m in METRICS))
    pad = " " * 16
    emit(f"{pad} rounds (ours/vLLM): " + "; ".join(
        f"{m.split('_')[0].upper()} " + " ".join(f"{x:.3f}" for x in ratios[m]) for m in ("ttft_ms", "tpot_ms")))
    tokens = {who: sorted({(f["num_prompt_tokens"], f["num_output_tokens"]) for f in got[who]}) for who in CLIENTS}
    gap = max(f["definitions_gap"] for f in got["vllm"])
    emit(f"{pad} prompt / output tokens per run: ours {tokens['ours']}, vllm {tokens['vllm']}; our statistics on "
         f"vLLM's per-request timings differ from its medians by at most {gap:.1e}")
    if p.capture_port is not None and p.together is None:
        over = {who: {m: _median(f[m] - f[f"wire_{m}"] for f in got[who]) for m in ("ttft_ms", "tpot_ms")}
                for who in CLIENTS}
        wire = {m: _median(o[f"wire_{m}"] / v[f"wire_{m}"] for o, v in zip(got["ours"], got["vllm"]))
                for m in ("ttft_ms", "tpot_ms")}
        emit(f"{pad} on the wire: each client's median over the wire's, TTFT ours {over['ours']['ttft_ms']:+.3f} ms, "
             f"vllm {over['vllm']['ttft_ms']:+.3f} ms; TPOT ours {over['ours']['tpot_ms']:+.3f} ms, vllm "
             f"{over['vllm']['tpot_ms']:+.3f} ms; the server's own (wire) medians for ours' requests over vLLM's: "
             f"TTFT {wire['ttft_ms']:.3f}, TPOT {wire['tpot_ms']:.3f}")
        if p.closed_loop:       # when the next request follows a finished stream
            turn = {who: _median(f["wire_turnaround_ms"] for f in got[who]) for who in CLIENTS}
            emit(f"{pad} closed-loop turnaround on the wire (a POST after the latest stream end, median): ours "
                 f"{turn['ours']:.3f} ms, vllm {turn['vllm']:.3f} ms")
    if p.engine_work and p.together is None:
        total = {who: {k: sum(w[k] for w in work[who]) for k in work[who][0]} for who in CLIENTS}
        cpu = {who: _median(w["cpu_s"] for w in work[who]) for who in CLIENTS}
        emit(f"{pad} engine over the rounds, drafted / accepted tokens: ours {total['ours']['draft_tokens']:.0f} / "
             f"{total['ours']['accepted_tokens']:.0f}, vllm {total['vllm']['draft_tokens']:.0f} / "
             f"{total['vllm']['accepted_tokens']:.0f}; its CPU s per run (median): ours {cpu['ours']:.2f}, "
             f"vllm {cpu['vllm']:.2f}")
    emit(f"{pad} load average before / after: {load_before} / {load_average()}")
