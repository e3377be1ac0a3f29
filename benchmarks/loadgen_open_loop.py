"""Open-loop fidelity: does the load generator send at the rate it is asked, and say when it cannot?

    .venv/bin/python benchmarks/loadgen_open_loop.py [--rates 250,500,1000,2000,4000,8000]
        [--duration-s 3] [--arrival constant,poisson] [--client-processes 1]

Drives the burst stub (its own process, pinned to `--stub-cpu`) through `run_ladder` in open
loop at each rate (at most `--max-concurrency` in flight), with the client pinned to `--client-cpus`. Printed per
rate: the requested rate, the drawn schedule's own rate (a Poisson draw of n arrivals is off
the requested rate by ~1/sqrt(n); constant arrivals are exact), the achieved send rate, its
ratio to each, the client's lag behind the schedule (p50 / p99) and the saturation verdict the
rung carries. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import os

from conformance.loadgen import LoadgenSettings, MetricNames, Workload, run_ladder
from conformance.loadgen.event_loop import loop_name
from conformance.loadgen.stub_process import StubProcess


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="250,500,1000,2000,4000,8000")
    ap.add_argument("--duration-s", type=float, default=3.0, help="requests per rate = rate x this")
    ap.add_argument("--arrival", default="constant,poisson")
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--client-processes", type=int, default=1)
    ap.add_argument("--max-concurrency", type=int, default=256, help="the cap (0: none)")
    ap.add_argument("--stub-cpu", type=int, default=0)
    ap.add_argument("--client-cpus", default="1")
    a = ap.parse_args()
    cpus = tuple(int(x) for x in a.client_cpus.split(",") if x)
    print(f"open loop, burst stub on CPU {a.stub_cpu}, {a.client_processes} client process(es) on CPUs {cpus}, "
          f"{loop_name()}, {a.output_tokens} tokens a request, concurrency cap {a.max_concurrency or 'none'}")
    print(f"{'arrival':<9} {'asked/s':>8} {'sched/s':>8} {'sent/s':>8} {'sent/asked':>10} {'sent/sched':>10} "
          f"{'lag p50 ms':>10} {'lag p99 ms':>10}  verdict")
    with StubProcess(cpu=a.stub_cpu) as stub:
        if cpus and a.client_processes == 1 and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, set(cpus))
        for arrival in a.arrival.split(","):
            for rate in (float(x) for x in a.rates.split(",")):
                n = max(50, int(rate * a.duration_s))
                w = Workload(num_requests=n, prompt_tokens=16, output_tokens=a.output_tokens, seed=0, vocab_size=1024)
                s = LoadgenSettings(request_rates_per_s=(rate,), arrival=arrival, num_warmup_waves=1,
                                    min_requests_per_slot=1, max_num_requests_per_rung=n,
                                    max_concurrency=a.max_concurrency, request_timeout_s=60,
                                    num_client_processes=a.client_processes, client_cpus=cpus, keep_records=False)
                (r,) = run_ladder(stub.base_url, w, s, MetricNames()).rungs
                if r["status"] != "ok":
                    print(f"{arrival:<9} {rate:>8g} error: {r['message']}")
                    continue
                sent, sched = r["achieved_request_per_s"], r["scheduled_request_per_s"]
                verdict = r["saturation_message"] or "keeps up"
                print(f"{arrival:<9} {rate:>8g} {sched:>8.1f} {sent:>8.1f} {sent / rate:>10.4f} {sent / sched:>10.4f} "
                      f"{r['client_lag_ms']['median']:>10.3f} {r['client_lag_ms']['p99']:>10.3f}  {verdict}",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
