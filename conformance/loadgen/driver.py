"""One job of one client process: a slice of a rung's requests, closed-loop or open-loop.

A `Job` is plain data (it crosses the process boundary as JSON): the server, the workload, which
request indices this process sends, and how. Closed loop (`offsets_s` is None): `concurrency`
slots, each a keep-alive connection, take the next index as soon as their previous request ends.
Open loop: request `indices[j]` is due at `start_at_s + offsets_s[j]`; at most `concurrency`
are in flight (0: no cap), a due request waits for a free slot and that wait is its `queued_s`.

Contract: `run_job(job)` returns a `JobResult`: one `RequestRecord` per request sent, sorted by
index (with `stop_on_error` no new request starts after the first failure), the start instant
it used, and the event loop's lag (how late a 5 ms heartbeat woke, sampled throughout: a loop
that wakes late is a saturated client, whatever the server does). Every request body is encoded
before `start_at_s` (the harness's common start instant on the shared monotonic clock), so no
JSON encoding happens on the measured path; a job with `shift_late_start` whose preparation ran
past `start_at_s` starts when it is ready instead (one in-process job has no one to keep pace with).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from conformance.loadgen.client import OPENAI_COMPLETIONS, REQUEST_PROTOCOLS, Connection, encode_request
from conformance.loadgen.record import RequestRecord
from conformance.loadgen.workload import Workload

_perf = time.perf_counter


@dataclass(frozen=True)
class Job:
    base_url: str
    model: str
    workload: dict[str, Any]       # Workload fields
    tag: str                       # the prompts' tag (see Workload.prompt_token_ids)
    indices: list[int]
    concurrency: int               # closed loop: slots; open loop: the cap (0: none)
    start_at_s: float              # time.perf_counter() instant to start (CLOCK_MONOTONIC)
    offsets_s: list[float] | None = None
    temperature: float = 0.0
    extra_body: dict[str, Any] = field(default_factory=dict)
    protocol: str = OPENAI_COMPLETIONS     # client.REQUEST_PROTOCOLS
    request_timeout_s: float = 300.0
    connect_timeout_s: float = 10.0
    stop_on_error: bool = True
    worker: int = 0
    shift_late_start: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


HEARTBEAT_S = 0.005


@dataclass
class JobResult:
    records: list[RequestRecord]
    t0_s: float
    loop_lag_s: list[float]

    def to_json(self) -> dict[str, Any]:
        return {"records": [list(r) for r in self.records], "t0_s": self.t0_s, "loop_lag_s": self.loop_lag_s}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "JobResult":
        return cls([RequestRecord(*r[:4], tuple(r[4]), *r[5:]) for r in d["records"]], d["t0_s"], d["loop_lag_s"])


async def _heartbeat(lags: list[float]) -> None:
    while True:
        t = _perf()
        await asyncio.sleep(HEARTBEAT_S)
        lags.append(max(0.0, _perf() - t - HEARTBEAT_S))


def encode_bodies(job: Job) -> list[bytes]:
    u = urlsplit(job.base_url)
    w = Workload(**job.workload)
    path, body = REQUEST_PROTOCOLS[job.protocol]
    return [encode_request(u.hostname, u.port, path,
                           body(job.model, w.prompt_token_ids(job.tag, i), w.output_tokens,
                                job.temperature, job.extra_body)) for i in job.indices]


async def _sleep_until(t_s: float) -> None:
    """Wake at `t_s`, never before: loop timers may fire up to a millisecond early (uvloop rounds to
    ms), so sleep to a millisecond short of it and yield to the loop for the rest."""
    delay = t_s - _perf() - 1e-3
    if delay > 0:
        await asyncio.sleep(delay)
    while _perf() < t_s:
        await asyncio.sleep(0)


async def _closed(job: Job, payloads: list[bytes], conns: list[Connection]) -> list[RequestRecord]:
    records: list[RequestRecord] = []
    todo = iter(range(len(job.indices)))
    failed = False

    async def slot(conn: Connection) -> None:
        nonlocal failed
        for j in todo:
            if failed and job.stop_on_error:
                return
            rec = await conn.stream(payloads[j], job.indices[j], job.request_timeout_s, worker=job.worker)
            records.append(rec)
            failed = failed or not rec.ok

    await _sleep_until(job.start_at_s)
    await asyncio.gather(*(slot(c) for c in conns))
    return records


async def _open(job: Job, payloads: list[bytes], idle: list[Connection], host: str, port: int) -> list[RequestRecord]:
    records: list[RequestRecord] = []
    cap = asyncio.Semaphore(job.concurrency) if job.concurrency > 0 else None
    tasks: set[asyncio.Task] = set()
    failed = False

    async def one(j: int, due_s: float) -> None:
        nonlocal failed
        t = _perf()
        if cap is not None:
            await cap.acquire()
        queued = _perf() - t if cap is not None else 0.0
        conn = idle.pop() if idle else Connection(host, port, job.connect_timeout_s)
        try:
            rec = await conn.stream(payloads[j], job.indices[j], job.request_timeout_s, scheduled_s=due_s,
                                    worker=job.worker)
        finally:
            idle.append(conn)
            if cap is not None:
                cap.release()
        records.append(rec._replace(queued_s=queued))
        failed = failed or not rec.ok

    for j, off in enumerate(job.offsets_s):
        due = job.start_at_s + off
        await _sleep_until(due)
        if failed and job.stop_on_error:
            break
        task = asyncio.ensure_future(one(j, due))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)
    return records


async def _preconnect(conns: list[Connection]) -> None:
    """Open the connections before the start: connection setup is not a request's latency.
    A connection that fails here is retried by its first request, which records the error."""
    await asyncio.gather(*(c.connect() for c in conns), return_exceptions=True)


async def run_job(job: Job) -> JobResult:
    u = urlsplit(job.base_url)
    payloads = encode_bodies(job)
    lags: list[float] = []
    beat = asyncio.ensure_future(_heartbeat(lags))
    try:
        records, t0 = await _run(job, payloads, u.hostname, u.port)
    finally:
        beat.cancel()
    return JobResult(sorted(records, key=lambda r: r.index), t0, lags)


async def _run(job: Job, payloads: list[bytes], host: str, port: int) -> tuple[list[RequestRecord], float]:
    if job.offsets_s is None:
        conns = [Connection(host, port, job.connect_timeout_s) for _ in range(max(1, job.concurrency))]
        await _preconnect(conns)
        job = _shifted(job)
        try:
            records = await _closed(job, payloads, conns)
        finally:
            for c in conns:
                c.close()
    else:
        if len(job.offsets_s) != len(job.indices):
            raise ValueError("job.offsets_s: one offset per index is needed")
        idle = [Connection(host, port, job.connect_timeout_s) for _ in range(job.concurrency)]
        await _preconnect(idle)
        job = _shifted(job)
        try:
            records = await _open(job, payloads, idle, host, port)
        finally:
            for c in idle:
                c.close()
    return records, job.start_at_s


def _shifted(job: Job) -> Job:
    now = _perf()
    if job.shift_late_start and now > job.start_at_s:
        return replace(job, start_at_s=now + 0.001)
    return job
