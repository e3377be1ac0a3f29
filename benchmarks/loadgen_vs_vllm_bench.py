"""The load generator against `vllm bench serve`: same server, same workload, same run.

    .venv/bin/python benchmarks/loadgen_vs_vllm_bench.py [--rounds 10] [--servers reference,stub,ceiling]
        [--reference-concurrency 1,4] [--reference-requests 8,32] [--out benchmarks/results/FILE.txt]

Two clients drive one server in turns: `vllm bench serve` (the real CLI code from the cached vLLM
venv, resident in one interpreter: `vllm_bench_client`) and `conformance.loadgen` (`run_ladder`,
one client process), closed loop at each concurrency (vLLM's `--request-rate inf --max-concurrency
c`), the same number of requests of the same prompt length, a fixed output length (ignore_eos) and
greedy sampling on both (under sampling a random-weight draft is accepted far more often, so the
engine would do other work). Each client runs pinned to `--client-cpu`, each server to `--server-cpu`.

Points:
- `reference`: the reference engine's server (`reference_server_process`: tiny shapes, CPU), with
  `--reference-prompt-tokens` 128 so its TTFT is ~50 ms and its TPOT ~18 ms: the client's own cost
  is small against the engine's, so the two clients' medians must agree. Both send the same
  prompts: vLLM's draw (`VllmBench.prompts`), replayed by ours (`Workload(prompts=...)`). Its spec-decoding
  counters and CPU seconds are read around every run: both clients must cause the same drafted /
  accepted tokens, and its CPU time per run shows how much of the host the engine got. Each run is
  also watched on the wire (`loopback_capture`, with CAP_NET_RAW): how far each client's TTFT and
  TPOT sit above the wire's for the same requests is that client's own latency, and the wire
  medians of the two clients' requests say whether the server served both workloads alike.
  Besides the closed-loop points, open-loop points at `--reference-rates` (requests/s): both clients
  send on one Poisson schedule (`arrival_offsets`: this project's draw; vLLM replays it as its
  trace's timestamps with `--self-timed`), so how fast a client turns a finished stream into the
  next request no longer changes when requests reach the server, as it does in a closed loop.
  With `--pairing together` (or `both`) each reference point is run by both clients at once
  (`together ...` rows, `run_together`): the server's speed drifts by +-20% between runs on
  this host, and requests sent side by side see the same drift, so those rounds' ratios compare
  the clients, not two moments of the server.
- `stub`: the stub server pacing tokens `--step-delay-ms` apart after a first token `--first-token-delay-ms`
  after the request (an engine's prefill, exactly the same for every request: a server with no drift and no
  batching, so the two clients' medians differ by their own costs alone); with `--first-token-delay-ms 0`
  TTFT is nothing but the client's own cost.
- `ceiling`: the burst stub (no delay) at `--ceiling-concurrency`: the most requests/s each client
  drives, beside the stub's own ceiling (requests per CPU second it spent).

A shared, noisy host: the two clients alternate `--rounds` times per point, in alternating order
(vLLM first in even rounds, ours first in odd ones) so drift cancels; only figures taken side by
side compare. Printed per point: the median over rounds of each client's TTFT, TPOT, ITL and E2EL
medians and output tokens/s, and the median over rounds of each round's ours/vLLM ratio; below it
every round's TTFT and TPOT ratios, both clients' output tokens per run and the host's load average.
The definitions are vLLM's on both sides (`conformance.loadgen.client`): TTFT from the send to the
first chunk with choices, ITL every gap between such chunks, TPOT (last such chunk - TTFT) / (output
tokens - 1) per request, E2EL to the last such chunk, medians as numpy's, output tokens/s over the
wave's wall time. Checked in every run: this project's statistics recomputed on vLLM's own
per-request timings (`--save-detailed`) give vLLM's medians (the largest relative gap is printed).
Both clients' prompt and output token counts per run are printed (vLLM's `timed_trace` prompt
length is checked against the one asked). `--out` writes what is printed to a file as well. A
benchmark, not a test: it prints figures and checks nothing.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import vllm_bench_client  # noqa: E402
from benchmarks.loopback_capture import LoopbackCapture  # noqa: E402
from benchmarks.reference_server_process import ReferenceServer  # noqa: E402
from benchmarks.side_by_side import Point, Printer, compare_point, header, load_average  # noqa: E402
from conformance.loadgen import LoadgenSettings, MetricNames, Workload, run_ladder  # noqa: E402
from conformance.loadgen.arrivals import arrival_offsets_s  # noqa: E402
from conformance.loadgen.stats import quantile, spread  # noqa: E402
from conformance.loadgen.stub_process import StubProcess  # noqa: E402

VOCAB_SIZE = 1024
ARRIVAL_SEED = 0


def arrival_offsets(num_requests: int, request_rate_per_s: float, seed: int = ARRIVAL_SEED) -> list[float]:
    """The open-loop schedule `ours` sends on (conformance.loadgen's own draw), handed to vLLM's bench as
    its trace's timestamps: both clients send request i at the same offset from their start."""
    return arrival_offsets_s(num_requests, request_rate_per_s, "poisson", 1.0, seed=seed)


def ours(base_url: str, concurrency: int, num_requests: int, prompt_tokens: int, output_tokens: int,
         prompts: list[list[int]] = (), request_rate_per_s: float | None = None,
         arrival_seed: int = ARRIVAL_SEED) -> dict:
    """One rung of `conformance.loadgen` (one client process, this process's CPU affinity), replaying
    `prompts` when given: closed loop at `concurrency`, or open loop at `request_rate_per_s` (Poisson,
    no cap: its arrivals are `arrival_offsets(num_requests, request_rate_per_s, arrival_seed)`)."""
    w = Workload(num_requests=num_requests, prompt_tokens=prompt_tokens, output_tokens=output_tokens, seed=0,
                 vocab_size=VOCAB_SIZE, prompts=prompts)
    rates = () if request_rate_per_s is None else (request_rate_per_s,)
    s = LoadgenSettings(concurrencies=(concurrency,), num_warmup_waves=1, min_requests_per_slot=1,
                        max_num_requests_per_rung=num_requests, num_client_processes=1, request_rates_per_s=rates,
                        arrival="poisson", arrival_seed=arrival_seed)
    (r,) = run_ladder(base_url, w, s, MetricNames()).rungs
    if r["status"] != "ok":
        raise RuntimeError(f"loadgen rung failed: {r['message']}")
    return r


def run_together(bench: vllm_bench_client.VllmBench, base_url: str, model: str, concurrency: int,
                 num_requests: int, prompt_tokens: int, output_tokens: int, prompts: list[list[int]],
                 request_rate_per_s: float | None = None, round_index: int = 0) -> dict[str, dict]:
    """One run of both clients at once against one server: vLLM's bench is started, and once it
    reaches its warm-up (past its initial test request) ours starts its own warm-up and run; each
    sends its own copy of the workload: closed loop at `concurrency` each, or open loop at
    `request_rate_per_s` on two independent Poisson schedules (seeds 0 and 1, swapped between the
    clients every round: one schedule for both would pair their requests, and the one sent a
    moment later would wait behind the other's prefill every time)."""
    seeds = (round_index % 2, 1 - round_index % 2)          # vLLM's, ours
    offsets = None if request_rate_per_s is None else arrival_offsets(num_requests, request_rate_per_s, seeds[0])
    started = bench.start(base_url, model, None if offsets else concurrency, num_requests, prompt_tokens,
                          output_tokens, offsets)
    try:
        bench.wait_for_warmup(started)
        mine = ours_figures(ours(base_url, concurrency, num_requests, prompt_tokens, output_tokens, prompts,
                                 request_rate_per_s, seeds[1]))
    except BaseException:
        try:
            bench.finish(started)      # keep the resident bench's answers in step
        except RuntimeError:
            pass
        raise
    return {"vllm": vllm_figures(bench.finish(started)), "ours": mine}


def ours_figures(r: dict) -> dict[str, float]:
    last_ms = [d["chunk_offsets_us"][-1] / 1e3 for d in r["records"] if d["chunk_offsets_us"]]
    return {"ttft_ms": r["ttft_ms"]["median"], "tpot_ms": r["tpot_ms"]["median"], "itl_ms": r["itl_ms"]["median"],
            "e2el_ms": quantile(last_ms, 0.5), "output_tok_per_s": r["output_tok_per_s"],
            "request_per_s": r["request_per_s"], "num_output_tokens": r["num_output_tokens"],
            "num_prompt_tokens": sum(d["num_prompt_tokens"] or 0 for d in r["records"])}


def definitions_gap(result: dict) -> float:
    """Largest relative difference between vLLM's TTFT / TPOT / ITL / E2EL medians and this project's
    statistics (`RequestRecord`, `stats.spread`) recomputed on vLLM's own per-request timings: 0 when
    the definitions are the same."""
    recs = vllm_bench_client.as_records(result)
    mine = {"ttft": spread([r.ttft_s for r in recs], 1e3),
            "tpot": spread([r.tpot_s for r in recs if r.tpot_s is not None], 1e3),
            "itl": spread([x for r in recs for x in r.itl_s()], 1e3),
            "e2el": spread([r.last_chunk_s for r in recs], 1e3)}
    return max(abs(mine[m]["median"] / result[f"median_{m}_ms"] - 1) for m in mine)


def vllm_figures(result: dict) -> dict[str, float]:
    return {**vllm_bench_client.figures(result), "definitions_gap": definitions_gap(result)}


def ceiling(emit: Printer, a: argparse.Namespace, bench: vllm_bench_client.VllmBench) -> None:
    c, n, out = a.ceiling_concurrency, a.ceiling_requests, a.ceiling_output_tokens
    got: dict[str, list[float]] = {"vllm": [], "ours": []}
    load_before = load_average()
    with StubProcess(cpu=a.server_cpu) as stub:
        before = stub.state()
        for i in range(a.rounds):
            for who in (("vllm", "ours") if i % 2 == 0 else ("ours", "vllm")):
                if who == "vllm":
                    got[who].append(bench.run(stub.base_url, "stub", c, n, a.prompt_tokens, out)["request_throughput"])
                else:
                    got[who].append(ours(stub.base_url, c, n, a.prompt_tokens, out)["request_per_s"])
        after = stub.state()
    stub_ceiling = (after["num_requests"] - before["num_requests"]) / (after["cpu_s"] - before["cpu_s"])
    emit(f"ceiling: burst stub, c={c}, {n} requests of {out} tokens, {a.rounds} rounds each")
    for who, name in (("ours", "conformance.loadgen"), ("vllm", "vllm bench serve")):
        emit(f"  {name:<20} req/s per round {', '.join(f'{x:.0f}' for x in got[who])}; best {max(got[who]):.0f} "
             f"req/s ({max(got[who]) * out:.0f} tok/s), median {statistics.median(got[who]):.0f}")
    ratios = [o / v for o, v in zip(got["ours"], got["vllm"])]
    emit(f"  ours/vLLM: best {max(got['ours']) / max(got['vllm']):.2f}, median of rounds "
         f"{statistics.median(ratios):.2f}; the stub's own ceiling over all rounds: {stub_ceiling:.0f} req/s "
         f"per CPU second of its core")
    emit(f"  load average before / after: {load_before} / {load_average()}")


def _counts(text: str, n: int) -> list[int]:
    xs = [int(x) for x in text.split(",")]
    return xs + xs[-1:] * (n - len(xs))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm-venv", type=Path, default=vllm_bench_client.VLLM_VENV)
    ap.add_argument("--servers", default="reference,ceiling", help="comma list of reference, stub, ceiling")
    ap.add_argument("--rounds", type=int, default=10, help="alternations of the two clients per point")
    ap.add_argument("--reference-concurrency", default="1,4")
    ap.add_argument("--reference-requests", default="8,32",
                    help="requests per run, one per concurrency (at c > 1 enough that the first wave, arriving at "
                         "once, is not the median)")
    ap.add_argument("--reference-rates", default="1,2",
                    help="open-loop points against the reference (requests/s, Poisson): both clients send on one "
                         "schedule; empty for none")
    ap.add_argument("--reference-rate-requests", type=int, default=16, help="requests per open-loop run")
    ap.add_argument("--pairing", choices=("alternate", "together", "both"), default="alternate",
                    help="reference points: the clients in alternating runs, both at once in one run, or each point "
                         "both ways")
    ap.add_argument("--reference-prompt-tokens", type=int, default=128,
                    help="prompt length against the reference (its TTFT grows with it, the clients' own cost not)")
    ap.add_argument("--reference-output-tokens", type=int, default=32)
    ap.add_argument("--prompt-tokens", type=int, default=16, help="prompt length against the stub")
    ap.add_argument("--stub-concurrency", default="1,4,16")
    ap.add_argument("--stub-requests", type=int, default=50)
    ap.add_argument("--stub-output-tokens", type=int, default=64)
    ap.add_argument("--step-delay-ms", type=float, default=2.0)
    ap.add_argument("--first-token-delay-ms", type=float, default=50.0,
                    help="the stub's prefill: its TTFT before either client's own cost")
    ap.add_argument("--ceiling-concurrency", type=int, default=64)
    ap.add_argument("--ceiling-requests", type=int, default=3000)
    ap.add_argument("--ceiling-output-tokens", type=int, default=64)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--no-wire", action="store_true", help="skip the loopback capture (it needs CAP_NET_RAW)")
    ap.add_argument("--out", type=Path, default=None, help="also write the printed lines here")
    a = ap.parse_args()
    servers = a.servers.split(",")
    wire = not a.no_wire and LoopbackCapture.available()
    emit = Printer()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {a.client_cpu})   # our client runs in this process
    with vllm_bench_client.VllmBench(a.vllm_venv, Path(tempfile.mkdtemp(prefix="loadgen-vs-vllm-")), a.client_cpu,
                                     VOCAB_SIZE) as bench:
        emit(f"host: nproc {os.cpu_count()}, niceness {os.nice(0)}, load average {load_average()} at "
             f"{time.strftime('%Y-%m-%d %H:%M:%S')}; python {platform.python_version()}; vllm bench serve of "
             f"{bench.version}")
        emit(f"closed loop (c) and open loop on one Poisson schedule for both (r/s), ignore_eos, temperature 0; "
             f"both clients on CPU {a.client_cpu}, the server on CPU "
             f"{a.server_cpu}; {a.rounds} rounds per point, pairing {a.pairing} (alternate: one client after the "
             f"other, order alternating; together: both in one run); figures: medians over rounds; ratio: "
             f"median over rounds of ours/vLLM; wire: {'loopback capture' if wire else 'not measured'}")
        header(emit)
        if "reference" in servers:
            cs = [int(x) for x in a.reference_concurrency.split(",")]
            pt, out = a.reference_prompt_tokens, a.reference_output_tokens
            with ReferenceServer(a.server_cpu) as ref:
                for c, n in zip(cs, _counts(a.reference_requests, len(cs))):
                    prompts = bench.prompts(ref.base_url, ref.model, n, pt, out)   # both clients send these
                    run = {"vllm": lambda: vllm_figures(bench.run(ref.base_url, ref.model, c, n, pt, out)),
                           "ours": lambda: ours_figures(ours(ref.base_url, c, n, pt, out, prompts))}
                    if a.pairing != "together":
                        compare_point(emit, Point(f"reference {pt}", str(c), a.rounds, n, out, run, ref.spec_counters,
                                                  ref.port if wire else None, a.client_cpu))
                    if a.pairing != "alternate":
                        rounds = itertools.count()
                        both = lambda: run_together(bench, ref.base_url, ref.model, c, n, pt, out, prompts,
                                                    round_index=next(rounds))
                        compare_point(emit, Point(f"together {pt}", str(c), a.rounds, n, out, run, together=both))
                n = a.reference_rate_requests
                for rate in (float(x) for x in a.reference_rates.split(",") if x):
                    prompts, offsets = bench.prompts(ref.base_url, ref.model, n, pt, out), arrival_offsets(n, rate)
                    run = {"vllm": lambda: vllm_figures(bench.run(ref.base_url, ref.model, None, n, pt, out, offsets)),
                           "ours": lambda: ours_figures(ours(ref.base_url, 1, n, pt, out, prompts, rate))}
                    if a.pairing != "together":
                        compare_point(emit, Point(f"reference {pt}", f"{rate:g}/s", a.rounds, n, out, run,
                                                  ref.spec_counters, ref.port if wire else None, a.client_cpu))
                    if a.pairing != "alternate":
                        rounds = itertools.count()
                        both = lambda: run_together(bench, ref.base_url, ref.model, 1, n, pt, out, prompts, rate,
                                                    next(rounds))
                        compare_point(emit, Point(f"together {pt}", f"{rate:g}/s", a.rounds, n, out, run,
                                                  together=both))
        if "stub" in servers:
            n, pt, out = a.stub_requests, a.prompt_tokens, a.stub_output_tokens
            with StubProcess(cpu=a.server_cpu, step_delay_s=a.step_delay_ms / 1e3,
                             first_token_delay_s=a.first_token_delay_ms / 1e3) as stub:
                for c in (int(x) for x in a.stub_concurrency.split(",")):
                    run = {"vllm": lambda: vllm_figures(bench.run(stub.base_url, "stub", c, n, pt, out)),
                           "ours": lambda: ours_figures(ours(stub.base_url, c, n, pt, out))}
                    label = f"stub {a.first_token_delay_ms:g}+{a.step_delay_ms:g}ms"
                    compare_point(emit, Point(label, str(c), a.rounds, n, out, run, None,
                                              stub.port if wire else None, a.client_cpu))
        if "ceiling" in servers:
            ceiling(emit, a, bench)
        emit(f"done at {time.strftime('%Y-%m-%d %H:%M:%S')}, load average {load_average()}")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text("\n".join(emit.lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
