"""Harness settings: one flat frozen dataclass, units in every name (MLPerf LoadGen style)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from conformance.loadgen.arrivals import ARRIVALS

DEFAULT_CONCURRENCIES = (1, 2, 4, 8, 16, 32)
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
# Load one client event loop sustains comfortably (well under its ceiling, benchmarks/loadgen_overhead.py).
CONCURRENCY_PER_PROCESS = 64
RATE_PER_PROCESS_PER_S = 500.0


@dataclass(frozen=True)
class LoadgenSettings:
    """How a ladder is driven. Contract: validated on construction (`ValueError` naming the field).

    Each rung at concurrency c issues `max(workload.num_requests, c * min_requests_per_slot)`
    measured requests (capped by `max_num_requests_per_rung`) from c closed-loop workers, after
    `num_warmup_waves` waves of c warm-up requests that are not measured, and repeats that
    `num_repeats` times. Every request is bounded by `request_timeout_s`, every rung by
    `max_rung_duration_s`.

    Open loop (`request_rates_per_s` non-empty): one rung per rate instead of per concurrency,
    arrivals drawn by `arrival` (poisson / constant, `burstiness` as vLLM's), at most
    `max_concurrency` in flight (0: no cap), as `vllm bench serve --request-rate --max-concurrency`.
    Goodput counts the requests within every SLO given (`slo_ttft_ms`, `slo_tpot_ms`).
    `num_client_processes` (0: `auto_num_processes`) event loops drive a rung, pinned round-robin
    to `client_cpus` when given. `keep_records` keeps every request's record in the rung.
    """

    concurrencies: tuple[int, ...] = DEFAULT_CONCURRENCIES
    num_repeats: int = 1
    num_warmup_waves: int = 1
    min_requests_per_slot: int = 2
    max_num_requests_per_rung: int = 1024
    request_timeout_s: float = 300.0
    max_rung_duration_s: float = 900.0
    connect_timeout_s: float = 10.0
    temperature: float = 0.0
    stop_on_error: bool = True
    request_rates_per_s: tuple[float, ...] = ()
    arrival: str = "poisson"
    burstiness: float = 1.0
    max_concurrency: int = 0
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    num_client_processes: int = 0
    client_cpus: tuple[int, ...] = ()
    keep_records: bool = True
    arrival_seed: int = 0

    @property
    def open_loop(self) -> bool:
        return bool(self.request_rates_per_s)

    def auto_num_processes(self, concurrency: int, request_rate_per_s: float | None = None) -> int:
        """`num_client_processes`, or one event loop per REQUESTS_PER_PROCESS of load, at most one per core."""
        if self.num_client_processes:
            return self.num_client_processes
        cores = len(self.client_cpus) or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                          else os.cpu_count() or 1)
        want = (math.ceil(request_rate_per_s / RATE_PER_PROCESS_PER_S) if request_rate_per_s
                else math.ceil(concurrency / CONCURRENCY_PER_PROCESS))
        return max(1, min(cores, want))

    def __post_init__(self) -> None:
        if not self.concurrencies:
            raise ValueError("concurrencies: at least one rung is needed")
        for c in self.concurrencies:
            if not isinstance(c, int) or isinstance(c, bool) or c < 1:
                raise ValueError(f"concurrencies: each must be an integer >= 1, got {c!r}")
        for name in ("num_repeats", "min_requests_per_slot", "max_num_requests_per_rung"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name}: must be an integer >= 1, got {v!r}")
        if not isinstance(self.num_warmup_waves, int) or self.num_warmup_waves < 0:
            raise ValueError(f"num_warmup_waves: must be an integer >= 0, got {self.num_warmup_waves!r}")
        for name in ("request_timeout_s", "max_rung_duration_s", "connect_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)!r}")
        for r in self.request_rates_per_s:
            if not isinstance(r, (int, float)) or isinstance(r, bool) or not r > 0:
                raise ValueError(f"request_rates_per_s: each must be a number > 0, got {r!r}")
        if self.arrival not in ARRIVALS:
            raise ValueError(f"arrival: must be one of {ARRIVALS}, got {self.arrival!r}")
        if not self.burstiness > 0:
            raise ValueError(f"burstiness: must be > 0, got {self.burstiness!r}")
        for name in ("max_concurrency", "num_client_processes"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{name}: must be an integer >= 0, got {v!r}")
        for name in ("slo_ttft_ms", "slo_tpot_ms"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise ValueError(f"{name}: must be > 0 or None, got {v!r}")
        if self.temperature < 0:
            raise ValueError(f"temperature: must be >= 0, got {self.temperature!r}")

    def num_requests(self, concurrency: int, workload_num_requests: int) -> int:
        return min(self.max_num_requests_per_rung, max(workload_num_requests, concurrency * self.min_requests_per_slot))


@dataclass(frozen=True)
class MetricNames:
    """Prometheus counter names an engine exposes for speculative decoding (None: not exposed).

    Mean acceptance length over a rung = 1 + delta(accepted_tokens) / delta(drafts), the
    convention vLLM documents (accepted drafts plus the bonus token per verify step); where an
    engine exposes no drafts counter, delta(drafts) = delta(draft_tokens) / num_speculative_tokens.
    An engine with only a gauge of the acceptance length (SGLang's `sglang:spec_accept_length`)
    names it in `acceptance_length_gauge`: its value after the rung is taken (summed over label sets).
    `accepted_tokens_per_pos` names a counter with one sample per draft position (label `position`).
    """

    accepted_tokens: str | None = None
    draft_tokens: str | None = None
    drafts: str | None = None
    accepted_tokens_per_pos: str | None = None   # labelled by `position`: accepted drafts at each position
    acceptance_length_gauge: str | None = None
    extra: tuple[str, ...] = field(default_factory=tuple)
