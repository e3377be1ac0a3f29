"""Load-generator overhead: how fast the harness drives a server that costs (almost) nothing.

    .venv/bin/python benchmarks/loadgen_overhead.py [--output-tokens 64] [--requests 4000]
        [--concurrency 1,16,64,128] [--client-processes 1] [--stub-cpu 0] [--client-cpus 1]

The stub server (`conformance.loadgen.stub_server`) runs in its own process pinned to
`--stub-cpu`, answering each request with its pre-rendered 64-token stream (one SSE event per
token) in one write. The load generator drives it through `run_ladder` (the path every ladder
takes) with its client processes pinned to `--client-cpus`. Printed per rung: requests/s and
tokens/s the harness sustains, TTFT / ITL, and the stub's own ceiling: requests per CPU second it
spent in that rung (it runs on one core, so that is the most it could serve) and its utilisation
of that core. At c=1 a bare-socket client (one blocking socket, no parsing: the floor on this
host) runs the same stream in the same run, and the TTFT the load generator adds over it is
printed. A benchmark, not a test: it prints figures and checks nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import time
from urllib.parse import urlsplit

from conformance.loadgen import LoadgenSettings, MetricNames, Workload, run_ladder
from conformance.loadgen.event_loop import loop_name
from conformance.loadgen.stub_process import StubProcess


def bare_socket_ttft_s(base_url: str, output_tokens: int, n: int) -> list[float]:
    """TTFT of a blocking keep-alive socket: send, first recv holding a `data:` event; then drain."""
    u = urlsplit(base_url)
    data = json.dumps({"model": "stub", "prompt": [2] * 16, "max_tokens": output_tokens, "stream": True,
                       "ignore_eos": True}).encode()
    req = (f"POST /v1/completions HTTP/1.1\r\nHost: {u.hostname}\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(data)}\r\n\r\n").encode() + data
    sock = socket.create_connection((u.hostname, u.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        sock.sendall(req)
        buf, first = b"", None
        while not buf.endswith(b"0\r\n\r\n"):
            buf += sock.recv(65536)
            if first is None and b"data:" in buf:
                first = time.perf_counter() - t
        out.append(first)
    sock.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--requests", type=int, default=4000, help="measured requests per rung (c=1: a tenth)")
    ap.add_argument("--concurrency", default="1,16,64,128")
    ap.add_argument("--client-processes", type=int, default=1)
    ap.add_argument("--stub-cpu", type=int, default=0)
    ap.add_argument("--client-cpus", default="1", help="comma list; empty: not pinned")
    a = ap.parse_args()
    cpus = tuple(int(x) for x in a.client_cpus.split(",") if x)
    w = Workload(num_requests=a.requests, prompt_tokens=16, output_tokens=a.output_tokens, seed=0, vocab_size=1024)
    print(f"stub server in its own process on CPU {a.stub_cpu}; load generator: {a.client_processes} client "
          f"process(es) on CPUs {cpus or 'any'}, event loop {loop_name()}; {a.output_tokens} tokens a request, "
          f"one SSE event per token")
    print(f"{'c':>4} {'req/s':>8} {'tok/s':>9} {'ttft p50 ms':>12} {'itl p50 us':>11} "
          f"{'stub ceiling req/s':>19} {'stub core busy':>15}")
    with StubProcess(cpu=a.stub_cpu) as stub:
        if cpus and a.client_processes == 1 and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, set(cpus))   # one client process runs in this one
        bare = bare_socket_ttft_s(stub.base_url, a.output_tokens, 500)
        c1_ttft_ms = None
        for c in (int(x) for x in a.concurrency.split(",")):
            n = max(200, a.requests // 10) if c == 1 else a.requests
            settings = LoadgenSettings(concurrencies=(c,), num_warmup_waves=1, min_requests_per_slot=1,
                                       max_num_requests_per_rung=n, num_client_processes=a.client_processes,
                                       client_cpus=cpus, keep_records=False)
            before = stub.state()
            result = run_ladder(stub.base_url, Workload(**{**w.__dict__, "num_requests": n}), settings, MetricNames())
            after = stub.state()
            (r,) = result.rungs
            if r["status"] != "ok":
                print(f"{c:>4} error: {r['message']}")
                continue
            served = after["num_requests"] - before["num_requests"]
            cpu_s = after["cpu_s"] - before["cpu_s"]
            # the rung's measured wave plus its warm-up: the stub's CPU over all of them, its busy share of the wall
            ceiling = served / cpu_s if cpu_s > 0 else float("inf")
            print(f"{c:>4} {r['request_per_s']:>8.0f} {r['output_tok_per_s']:>9.0f} {r['ttft_ms']['median']:>12.3f} "
                  f"{r['itl_ms']['median'] * 1e3:>11.1f} {ceiling:>19.0f} "
                  f"{min(1.0, r['request_per_s'] / ceiling):>14.0%}")
            if c == 1:
                c1_ttft_ms = r["ttft_ms"]["median"]
    bare_ms = statistics.median(bare) * 1e3
    print(f"bare-socket client, c=1: TTFT p50 {bare_ms:.3f} ms")
    if c1_ttft_ms is not None:
        print(f"TTFT the load generator adds at c=1 over the bare socket: {c1_ttft_ms - bare_ms:.3f} ms (p50)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
