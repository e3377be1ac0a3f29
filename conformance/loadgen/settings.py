"""Harness settings: one flat frozen dataclass, units in every name (MLPerf LoadGen style)."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_CONCURRENCIES = (1, 2, 4, 8, 16, 32)
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


@dataclass(frozen=True)
class LoadgenSettings:
    """How a ladder is driven. Contract: validated on construction (`ValueError` naming the field).

    Each rung at concurrency c issues `max(workload.num_requests, c * min_requests_per_slot)`
    measured requests (capped by `max_num_requests_per_rung`) from c closed-loop workers, after
    `num_warmup_waves` waves of c warm-up requests that are not measured, and repeats that
    `num_repeats` times. Every request is bounded by `request_timeout_s`, every rung by
    `max_rung_duration_s`.
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
    """

    accepted_tokens: str | None = None
    draft_tokens: str | None = None
    drafts: str | None = None
    acceptance_length_gauge: str | None = None
    extra: tuple[str, ...] = field(default_factory=tuple)
