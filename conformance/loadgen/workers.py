"""Client processes: one event loop per core, their records merged by the harness on one clock.

A Python event loop is one core's worth of client; past that a ladder measures the client. So a
rung is split into jobs (`driver.Job`) over `num_processes` workers: in closed loop, slot s of the
rung's c slots belongs to worker s % P and request i to slot i % c; in open loop, request i of
the arrival schedule goes to worker i % P with the concurrency cap split evenly. Each worker is
`python -m conformance.loadgen.workers`, reading one job per stdin line and answering one JSON
line of records. The harness picks the common start instant `start_at_s` on
`time.perf_counter()` (CLOCK_MONOTONIC, shared by every process of the host), so the merged
records need no translation. With one process the job runs in the harness's own thread.

Contract: `ClientPool.run(jobs)` returns a `JobResult` of every job merged: records sorted by
index, the earliest start instant, every loop's lag samples; a worker that dies or answers
garbage raises `RuntimeError` naming it (a client fault is never an engine's failure).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Sequence

from conformance.loadgen import event_loop
from dataclasses import replace

from conformance.loadgen.driver import Job, JobResult, run_job

START_LEAD_S = 0.25   # time between handing out jobs and their common start: every worker encodes first


def split_closed(indices: Sequence[int], concurrency: int, num_processes: int) -> list[tuple[list[int], int]]:
    """[(indices, slots)] per worker with at least one slot."""
    out = []
    for w in range(min(num_processes, concurrency)):
        slots = [s for s in range(concurrency) if s % num_processes == w]
        mine = [i for i in indices if i % concurrency in slots]
        out.append((mine, len(slots)))
    return out


def split_open(indices: Sequence[int], offsets_s: Sequence[float], cap: int,
               num_processes: int) -> list[tuple[list[int], list[float], int]]:
    """[(indices, offsets, cap share)] per worker; cap 0 means none."""
    p = max(1, min(num_processes, len(indices)))
    out = []
    for w in range(p):
        share = 0 if cap == 0 else max(1, cap // p + (w < cap % p))
        out.append((list(indices[w::p]), list(offsets_s[w::p]), share))
    return out


class ClientPool:
    def __init__(self, num_processes: int = 1, cpus: Sequence[int] | None = None) -> None:
        if num_processes < 1:
            raise ValueError(f"num_processes: must be >= 1, got {num_processes}")
        self.num_processes = num_processes
        self.cpus = list(cpus) if cpus else None
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> "ClientPool":
        if self.num_processes > 1:
            env = dict(os.environ)
            root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
            for w in range(self.num_processes):
                argv = [sys.executable, "-m", "conformance.loadgen.workers"]
                if self.cpus:
                    argv += ["--cpu", str(self.cpus[w % len(self.cpus)])]
                self.procs.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                                   text=True, bufsize=1))
        return self

    def __exit__(self, *exc: Any) -> None:
        for p in self.procs:
            if p.stdin:
                p.stdin.close()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []

    def start_at_s(self) -> float:
        return time.perf_counter() + (START_LEAD_S if self.procs else 0.0)

    def run(self, jobs: Sequence[Job]) -> JobResult:
        if not self.procs:
            if len(jobs) != 1:
                raise ValueError("an in-process pool runs one job at a time")
            return event_loop.run(run_job(replace(jobs[0], shift_late_start=True)))
        if len(jobs) > len(self.procs):
            raise ValueError(f"{len(jobs)} jobs for {len(self.procs)} client processes")
        for p, job in zip(self.procs, jobs):
            p.stdin.write(json.dumps(job.to_json()) + "\n")
            p.stdin.flush()
        parts: list[JobResult] = []
        for w, (p, job) in enumerate(zip(self.procs, jobs)):
            line = p.stdout.readline()
            try:
                parts.append(JobResult.from_json(json.loads(line)))
            except (ValueError, TypeError, KeyError) as exc:
                rc = p.poll()
                raise RuntimeError(f"client process {w} (pid {p.pid}) gave no records"
                                   f"{'' if rc is None else f', exited with code {rc}'}: {exc}") from None
        records = sorted((r for part in parts for r in part.records), key=lambda r: r.index)
        return JobResult(records, min(part.t0_s for part in parts), [x for part in parts for x in part.loop_lag_s])


def _serve() -> int:
    """Worker process: run each job read from stdin, answer its records as one JSON line."""
    if "--cpu" in sys.argv and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(sys.argv[sys.argv.index("--cpu") + 1])})
    for line in sys.stdin:
        job = Job(**json.loads(line))
        result = event_loop.run(run_job(job))
        sys.stdout.write(json.dumps(result.to_json()) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(_serve())
