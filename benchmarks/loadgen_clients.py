"""Streaming-client candidates for the load generator, measured against the same stub in one run.

    .venv/bin/python benchmarks/loadgen_clients.py [--requests 2000] [--concurrency 64]

Each candidate runs `--concurrency` closed-loop slots in one process (pinned to `--client-cpu`)
against the stub server in its own process (pinned to `--stub-cpu`), reads 64-token SSE streams
and parses every event with `json.loads` (what a real client must do to count tokens and see
errors): httpx (`aiter_lines`), aiohttp (`content.iter_any` + an SSE split, as `vllm bench serve`
reads), asyncio streams (`readuntil` / `readexactly` on the chunked body), and the load
generator's own `asyncio.Protocol` client (`conformance.loadgen.client`), each on the standard
event loop and on uvloop where the library runs on it. Prints requests/s and tokens/s per
candidate. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from urllib.parse import urlsplit

from conformance.loadgen.client import Connection, completion_body, encode_request
from conformance.loadgen.stub_process import StubProcess

BODY = completion_body("stub", [2] * 16, 64, 0.0)


def _count(payload: bytes | str) -> int:
    chunk = json.loads(payload)
    return 1 if any(c.get("text") for c in chunk.get("choices") or ()) else 0


async def httpx_client(url: str, n: int, c: int) -> int:
    import httpx

    tokens = 0
    todo = iter(range(n))
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=c), trust_env=False, timeout=60) as client:
        async def slot() -> None:
            nonlocal tokens
            for _ in todo:
                async with client.stream("POST", url, json=BODY) as resp:
                    async for line in resp.aiter_lines():
                        if line.startswith("data:") and line[5:].strip() != "[DONE]":
                            tokens += _count(line[5:])
        await asyncio.gather(*(slot() for _ in range(c)))
    return tokens


async def aiohttp_client(url: str, n: int, c: int) -> int:
    import aiohttp

    tokens = 0
    todo = iter(range(n))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=c)) as session:
        async def slot() -> None:
            nonlocal tokens
            for _ in todo:
                async with session.post(url, json=BODY) as resp:
                    buf = b""
                    async for data in resp.content.iter_any():
                        buf += data
                        *events, buf = buf.split(b"\n\n")
                        for e in events:
                            if e.startswith(b"data:") and e[5:].strip() != b"[DONE]":
                                tokens += _count(e[5:])
        await asyncio.gather(*(slot() for _ in range(c)))
    return tokens


async def streams_client(url: str, n: int, c: int) -> int:
    u = urlsplit(url)
    req = encode_request(u.hostname, u.port, u.path, BODY)
    tokens = 0
    todo = iter(range(n))

    async def slot() -> None:
        nonlocal tokens
        reader, writer = await asyncio.open_connection(u.hostname, u.port)
        for _ in todo:
            writer.write(req)
            await reader.readuntil(b"\r\n\r\n")
            sse = b""
            while True:
                size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
                data = await reader.readexactly(size + 2)
                if size == 0:
                    break
                sse += data[:-2]
                *events, sse = sse.split(b"\n\n")
                for e in events:
                    if e.startswith(b"data:") and e[5:].strip() != b"[DONE]":
                        tokens += _count(e[5:])
        writer.close()
    await asyncio.gather(*(slot() for _ in range(c)))
    return tokens


async def protocol_client(url: str, n: int, c: int) -> int:
    u = urlsplit(url)
    req = encode_request(u.hostname, u.port, u.path, BODY)
    conns = [Connection(u.hostname, u.port, 10) for _ in range(c)]
    todo = iter(range(n))
    tokens = 0

    async def slot(conn: Connection) -> None:
        nonlocal tokens
        for i in todo:
            rec = await conn.stream(req, i, 60)
            tokens += len(rec.chunk_times_s)
        conn.close()
    await asyncio.gather(*(slot(k) for k in conns))
    return tokens


CANDIDATES = {"httpx": httpx_client, "aiohttp": aiohttp_client, "asyncio streams": streams_client,
              "asyncio protocol (loadgen)": protocol_client}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--stub-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    a = ap.parse_args()
    import uvloop

    with StubProcess(cpu=a.stub_cpu) as stub:
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {a.client_cpu})
        url = f"{stub.base_url}/v1/completions"
        print(f"c={a.concurrency}, {a.requests} requests of 64 tokens, one client process; stub in its own process")
        print(f"{'client':<28} {'loop':<8} {'req/s':>8} {'tok/s':>9}")
        for name, fn in CANDIDATES.items():
            for loop in ("asyncio", "uvloop"):
                factory = uvloop.new_event_loop if loop == "uvloop" else asyncio.new_event_loop
                with asyncio.Runner(loop_factory=factory) as runner:
                    runner.run(fn(url, a.concurrency, a.concurrency))   # warm-up: connections, imports
                    t = time.perf_counter()
                    tokens = runner.run(fn(url, a.requests, a.concurrency))
                    dt = time.perf_counter() - t
                print(f"{name:<28} {loop:<8} {a.requests / dt:>8.0f} {tokens / dt:>9.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
