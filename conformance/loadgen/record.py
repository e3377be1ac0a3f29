"""The per-request record: one format for closed-loop and open-loop load, in memory and on disk.

Clock: every time is `time.perf_counter()` seconds, which on Linux is CLOCK_MONOTONIC, one clock
for every process of the host, so records of different worker processes merge without
translation. On disk (`to_json`) times are offsets from the rung's `t0_s` (the instant its
workers were told to start), and the rung carries `t0_wall_time_ns` (`time.time_ns()` read at
the same instant) to place it in calendar time.

Record fields on disk (units in names):
    index, worker, scheduled_ms (open loop: when the arrival process asked for it; closed loop:
    = start_ms), start_ms (sent), ttft_ms (first chunk with choices, see `client`), e2e_ms,
    chunk_offsets_us (every such chunk's arrival, microseconds after start), num_output_tokens
    (usage.completion_tokens, else the number of chunks carrying text), num_prompt_tokens, queued_ms (open
    loop: time waiting for a slot under the concurrency cap), error
"""

from __future__ import annotations

from typing import Any, NamedTuple


class RequestRecord(NamedTuple):
    index: int
    start_s: float
    end_s: float
    ttft_s: float | None              # first chunk with choices (text possibly empty), from start
    chunk_times_s: tuple[float, ...]  # arrival of every chunk with choices
    num_output_tokens: int
    num_prompt_tokens: int | None
    error: str | None
    scheduled_s: float | None = None  # open loop: the arrival instant; None for closed loop
    worker: int = 0
    queued_s: float = 0.0             # open loop: time spent waiting for a slot under the concurrency cap

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def e2e_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def last_chunk_s(self) -> float | None:
        """From start to the last chunk with choices: `vllm bench serve`'s request latency (E2EL), which
        stops at the last chunk with choices, before the usage chunk and `[DONE]` (`e2e_s` includes them)."""
        return self.chunk_times_s[-1] - self.start_s if self.chunk_times_s else None

    @property
    def tpot_s(self) -> float | None:
        """(last chunk - TTFT) / (output tokens - 1): vLLM's (latency - ttft) / (output_len - 1)."""
        last = self.last_chunk_s
        if self.ttft_s is None or last is None or self.num_output_tokens < 2:
            return None
        return (last - self.ttft_s) / (self.num_output_tokens - 1)

    @property
    def lateness_s(self) -> float:
        """How long after its arrival instant the request was sent (0 in closed loop)."""
        return 0.0 if self.scheduled_s is None else self.start_s - self.scheduled_s

    @property
    def client_lag_s(self) -> float:
        """Lateness not explained by the concurrency cap: the client itself was late."""
        return max(0.0, self.lateness_s - self.queued_s)

    def itl_s(self) -> list[float]:
        t = self.chunk_times_s
        return [b - a for a, b in zip(t, t[1:])]

    def to_json(self, t0_s: float) -> dict[str, Any]:
        start_ms = (self.start_s - t0_s) * 1e3
        return {"index": self.index, "worker": self.worker,
                "scheduled_ms": round((self.scheduled_s - t0_s) * 1e3 if self.scheduled_s is not None else start_ms, 4),
                "start_ms": round(start_ms, 4),
                "ttft_ms": None if self.ttft_s is None else round(self.ttft_s * 1e3, 4),
                "e2e_ms": round(self.e2e_s * 1e3, 4),
                "chunk_offsets_us": [round((t - self.start_s) * 1e6) for t in self.chunk_times_s],
                "num_output_tokens": self.num_output_tokens, "num_prompt_tokens": self.num_prompt_tokens,
                "queued_ms": round(self.queued_s * 1e3, 4), "error": self.error}

    @classmethod
    def from_json(cls, d: dict[str, Any], t0_s: float = 0.0, open_loop: bool = True) -> "RequestRecord":
        start = t0_s + d["start_ms"] / 1e3
        return cls(index=int(d["index"]), start_s=start, end_s=start + d["e2e_ms"] / 1e3,
                   ttft_s=None if d["ttft_ms"] is None else d["ttft_ms"] / 1e3,
                   chunk_times_s=tuple(start + u / 1e6 for u in d["chunk_offsets_us"]),
                   num_output_tokens=int(d["num_output_tokens"]), num_prompt_tokens=d["num_prompt_tokens"],
                   error=d["error"], scheduled_s=t0_s + d["scheduled_ms"] / 1e3 if open_loop else None,
                   worker=int(d.get("worker", 0)), queued_s=d.get("queued_ms", 0.0) / 1e3)
