"""Load-generator overhead: how fast the harness can drive a server that costs nothing.

    .venv/bin/python benchmarks/loadgen_overhead.py [--output-tokens 64] [--requests 200]

Runs the stub streaming server (`conformance.loadgen.stub_server`, standard library, emits
tokens as fast as it can, one token per SSE chunk) and drives it with the load generator at
several concurrencies; prints the requests/s and tokens/s the harness sustains, and the latency
it adds: the load generator's median end-to-end time per request at c=1 against a bare
`http.client` request reading the same stream (the floor on this machine). A benchmark, not a
test: it prints figures and checks nothing.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import time
from urllib.parse import urlsplit

from conformance.loadgen import LoadgenSettings, MetricNames, Workload, run_ladder
from conformance.loadgen.stub_server import StubServer


def bare_e2e_s(base_url: str, output_tokens: int, n: int) -> list[float]:
    u = urlsplit(base_url)
    body = json.dumps({"model": "stub", "prompt": [2] * 16, "max_tokens": output_tokens, "stream": True,
                       "ignore_eos": True})
    conn = http.client.HTTPConnection(u.hostname, u.port)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        while resp.read(65536):
            pass
        out.append(time.perf_counter() - t)
    conn.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--requests", type=int, default=200, help="measured requests per rung")
    ap.add_argument("--concurrency", default="1,4,16,64")
    a = ap.parse_args()
    cs = tuple(int(x) for x in a.concurrency.split(","))
    w = Workload(num_requests=a.requests, prompt_tokens=16, output_tokens=a.output_tokens, seed=0, vocab_size=1024)
    settings = LoadgenSettings(concurrencies=cs, num_warmup_waves=1, min_requests_per_slot=1)
    with StubServer(tokens_per_step=1) as srv:
        bare = bare_e2e_s(srv.base_url, a.output_tokens, 100)
        result = run_ladder(srv.base_url, w, settings, MetricNames())
    print(f"stub server, {a.output_tokens} tokens per request, one token per SSE chunk, {a.requests} requests per rung")
    print(f"bare http.client e2e (c=1, keep-alive): median {statistics.median(bare) * 1e3:.2f} ms")
    print(f"{'c':>4} {'req/s':>9} {'tok/s':>10} {'e2e p50 ms':>11} {'ttft p50 ms':>12} {'itl p50 us':>11}")
    for r in result.rungs:
        if r["status"] != "ok":
            print(f"{r['concurrency']:>4} error: {r['message']}")
            continue
        print(f"{r['concurrency']:>4} {r['request_per_s']:>9.1f} {r['output_tok_per_s']:>10.0f} "
              f"{r['e2e_ms']['median']:>11.2f} {r['ttft_ms']['median']:>12.2f} {r['itl_ms']['median'] * 1e3:>11.1f}")
    c1 = next((r for r in result.rungs if r["concurrency"] == 1), None)
    if c1:
        added = c1["e2e_ms"]["median"] - statistics.median(bare) * 1e3
        print(f"latency the load generator adds at c=1: {added:.2f} ms per request "
              f"({added * 1e3 / a.output_tokens:.1f} us per token)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
