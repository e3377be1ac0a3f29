"""What a server library costs per streamed token chunk: aiohttp (low-level server) against
uvicorn + FastAPI (vLLM's), the same endpoint, measured in one run (not a test).

    python benchmarks/gpu_server_overhead.py [--concurrency 32] [--chunks 128] [--requests 256]

Each library serves, in its own process on 127.0.0.1, one POST endpoint that reads a JSON body
and streams `--chunks` SSE chunks of a completion-sized JSON (no engine behind it: the figure is
the library's), then `data: [DONE]`. One asyncio httpx client runs `--concurrency` closed-loop
streams until `--requests` completed. Printed per library: streamed chunks per second (the whole
machine's CPU is shared by client and server, so compare the two in one run, as ratios), median
request time, and the server's CPU seconds per 1,000 chunks. Needs aiohttp, and fastapi + uvicorn
where that comparison is wanted (skipped without them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time

CHUNK = {"id": "cmpl-0", "object": "text_completion", "created": 0, "model": "m",
         "choices": [{"index": 0, "text": " 17 42 99 3", "token_ids": [17, 42, 99, 3], "logprobs": None,
                      "finish_reason": None}]}

AIOHTTP_APP = '''
import json, sys
from aiohttp import web
CHUNK = json.loads(sys.argv[2]); N = int(sys.argv[3])
async def handle(request):
    body = json.loads(await request.read())
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    for _ in range(N):
        await resp.write(("data: " + json.dumps(CHUNK) + "\\n\\n").encode())
    await resp.write(b"data: [DONE]\\n\\n")
    await resp.write_eof()
    return resp
app = web.Application(); app.router.add_post("/v1/completions", handle)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
'''

FASTAPI_APP = '''
import json, sys
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
CHUNK = json.loads(sys.argv[2]); N = int(sys.argv[3])
app = FastAPI()
@app.post("/v1/completions")
async def handle(request: Request):
    body = await request.json()
    async def gen():
        for _ in range(N):
            yield "data: " + json.dumps(CHUNK) + "\\n\\n"
        yield "data: [DONE]\\n\\n"
    return StreamingResponse(gen(), media_type="text/event-stream")
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _drive(url: str, concurrency: int, num_requests: int) -> tuple[int, list[float]]:
    import httpx

    body = {"prompt": list(range(512)), "max_tokens": 128, "stream": True}
    left = num_requests
    times: list[float] = []
    chunks = 0

    async def one(client):
        nonlocal left, chunks
        while left > 0:
            left -= 1
            t0 = time.perf_counter()
            async with client.stream("POST", url, json=body) as r:
                async for line in r.aiter_lines():
                    if line.startswith("data: {"):
                        chunks += 1
            times.append(time.perf_counter() - t0)

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=60, limits=limits, trust_env=False) as client:
        await asyncio.gather(*(one(client) for _ in range(concurrency)))
    return chunks, times


def measure(name: str, app: str, args) -> dict:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-c", app, str(port), json.dumps(CHUNK), str(args.chunks)])
    try:
        url = f"http://127.0.0.1:{port}/v1/completions"
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        asyncio.run(_drive(url, args.concurrency, args.concurrency))          # warm-up
        cpu0, t0 = _cpu_s(proc.pid), time.perf_counter()
        chunks, times = asyncio.run(_drive(url, args.concurrency, args.requests))
        wall, cpu = time.perf_counter() - t0, _cpu_s(proc.pid) - cpu0
    finally:
        proc.terminate()
        proc.wait()
    return {"library": name, "chunks_per_s": chunks / wall, "request_ms_p50": statistics.median(times) * 1e3,
            "server_cpu_s_per_1000_chunks": cpu / chunks * 1000, "num_chunks": chunks}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--chunks", type=int, default=128)
    ap.add_argument("--requests", type=int, default=256)
    args = ap.parse_args(argv)
    rows = [measure("aiohttp", AIOHTTP_APP, args)]
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401

        rows.append(measure("uvicorn+fastapi", FASTAPI_APP, args))
    except ImportError:
        print("fastapi / uvicorn not installed: aiohttp only")
    for r in rows:
        print(f"{r['library']:<16} {r['chunks_per_s']:9.0f} chunks/s  request p50 {r['request_ms_p50']:7.1f} ms  "
              f"server CPU {r['server_cpu_s_per_1000_chunks'] * 1e3:6.1f} ms / 1000 chunks")
    if len(rows) == 2:
        print(f"aiohttp / uvicorn+fastapi: {rows[0]['chunks_per_s'] / rows[1]['chunks_per_s']:.2f}x chunks/s, "
              f"{rows[1]['server_cpu_s_per_1000_chunks'] / rows[0]['server_cpu_s_per_1000_chunks']:.2f}x less server CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
