"""Concurrency ladders: closed-loop rungs of streaming requests against one server.

Contract: `run_ladder(...)` returns one rung dict per concurrency it reached, in order. A rung
is `ok` when every measured request streamed its full output; otherwise `error` with the first
failure as `message`, and (with `settings.stop_on_error`) the ladder stops there, keeping the
rungs already measured. Nothing here raises for what the server does. Rung fields:

    concurrency, status, message, output_tok_per_s (median over repeats), output_tok_per_s_repeats,
    ttft_ms_median_repeats (each repeat's median TTFT: a first-seen-shape stall shows in one repeat only),
    request_per_s, num_requests, num_failed_requests, num_output_tokens,
    ttft_ms / tpot_ms / itl_ms / e2e_ms: {median, p10, p90, num_samples} over every measured request,
    mean_acceptance_length (from the engine's /metrics counters over the measured requests; None
    when the engine exposes none), wall_s (measured wall time, summed over repeats)
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

import httpx

from conformance.loadgen.client import RequestRecord, completion_body, stream_completion
from conformance.loadgen.prometheus import parse_samples
from conformance.loadgen.settings import LOOPBACK_HOSTS, LoadgenSettings, MetricNames
from conformance.loadgen.stats import spread
from conformance.loadgen.workload import Workload


@dataclass
class LadderResult:
    model: str | None
    rungs: list[dict[str, Any]] = field(default_factory=list)
    message: str | None = None   # why the ladder could not start or stopped early


def check_loopback(base_url: str) -> None:
    host = urlsplit(base_url).hostname or ""
    if host not in LOOPBACK_HOSTS and f"[{host}]" not in LOOPBACK_HOSTS:
        raise ValueError(f"loadgen drives loopback servers only; {base_url!r} is not on 127.0.0.1 / localhost / ::1")


def _client(settings: LoadgenSettings, concurrency: int) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        timeout=httpx.Timeout(settings.request_timeout_s, connect=settings.connect_timeout_s),
        limits=httpx.Limits(max_connections=concurrency + 2, max_keepalive_connections=concurrency + 2),
        trust_env=False)


async def _drive(client: httpx.AsyncClient, url: str, model: str, workload: Workload, settings: LoadgenSettings,
                 concurrency: int, tag: str, num_requests: int,
                 extra_body: Mapping[str, Any]) -> tuple[list[RequestRecord], float]:
    """Closed loop: `concurrency` workers issue requests 0..n-1 in order. Returns (records, wall_s)."""
    records: list[RequestRecord] = []
    next_index = iter(range(num_requests))
    bodies = [completion_body(model, workload.prompt_token_ids(tag, i), workload.output_tokens, settings.temperature,
                              extra_body) for i in range(num_requests)]

    async def worker() -> None:
        for i in next_index:
            rec = await stream_completion(client, url, bodies[i], i, settings.request_timeout_s)
            records.append(rec)
            if not rec.ok and settings.stop_on_error:
                return

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return sorted(records, key=lambda r: r.index), time.perf_counter() - start


async def _scrape(client: httpx.AsyncClient, base_url: str) -> dict[str, float] | None:
    try:
        resp = await client.get(f"{base_url}/metrics", timeout=10.0)
    except (httpx.HTTPError, OSError):
        return None
    return parse_samples(resp.text) if resp.status_code == 200 else None


def _acceptance_length(before: dict | None, after: dict | None, names: MetricNames, k: int) -> float | None:
    if after is not None and names.acceptance_length_gauge and not names.accepted_tokens:
        return after.get(names.acceptance_length_gauge)
    if before is None or after is None or not names.accepted_tokens:
        return None
    accepted = after.get(names.accepted_tokens, 0.0) - before.get(names.accepted_tokens, 0.0)
    if names.drafts and names.drafts in after:
        drafts = after[names.drafts] - before.get(names.drafts, 0.0)
    elif names.draft_tokens and names.draft_tokens in after and k > 0:
        drafts = (after[names.draft_tokens] - before.get(names.draft_tokens, 0.0)) / k
    else:
        return None
    return 1.0 + accepted / drafts if drafts > 0 else None


def _first_failure(records: list[RequestRecord], output_tokens: int) -> str | None:
    for r in records:
        if not r.ok:
            return f"request {r.index}: {r.error}"
        if r.num_output_tokens != output_tokens:
            return (f"request {r.index}: the engine returned {r.num_output_tokens} output tokens where "
                    f"{output_tokens} were asked (ignore_eos not honoured?)")
    return None


async def _rung(base_url: str, model: str, workload: Workload, settings: LoadgenSettings, names: MetricNames,
                concurrency: int, k: int, extra_body: Mapping[str, Any]) -> dict[str, Any]:
    url = f"{base_url}/v1/completions"
    n = settings.num_requests(concurrency, workload.num_requests)
    measured: list[RequestRecord] = []
    tok_per_s: list[float] = []
    ttft_medians_ms: list[float] = []
    wall_s = 0.0
    accept_lengths: list[float] = []
    message: str | None = None
    async with _client(settings, concurrency) as client:
        for rep in range(settings.num_repeats):
            for w in range(settings.num_warmup_waves):
                warm, _ = await _drive(client, url, model, workload, settings, concurrency,
                                       f"warmup-c{concurrency}-r{rep}-w{w}", concurrency, extra_body)
                message = _first_failure(warm, workload.output_tokens)
                if message:
                    message = f"warm-up {message}"
                    break
            if message:
                break
            before = await _scrape(client, base_url)
            records, wall = await _drive(client, url, model, workload, settings, concurrency,
                                         f"c{concurrency}-r{rep}", n, extra_body)
            after = await _scrape(client, base_url)
            measured += records
            wall_s += wall
            message = _first_failure(records, workload.output_tokens)
            if message:
                break
            tok_per_s.append(sum(r.num_output_tokens for r in records) / wall)
            ttft = spread([r.ttft_s for r in records if r.ttft_s is not None], 1e3)
            if ttft:
                ttft_medians_ms.append(ttft["median"])
            a = _acceptance_length(before, after, names, k)
            if a is not None:
                accept_lengths.append(a)
    ok = [r for r in measured if r.ok]
    itl = [x for r in ok for x in r.itl_s()]
    return {
        "concurrency": concurrency,
        "status": "error" if message else "ok",
        "message": message,
        "output_tok_per_s": None if message else spread(tok_per_s)["median"],
        "output_tok_per_s_repeats": tok_per_s,
        "ttft_ms_median_repeats": ttft_medians_ms,
        "request_per_s": None if message or wall_s <= 0 else len(ok) / wall_s,
        "num_requests": len(measured),
        "num_failed_requests": len(measured) - len(ok),
        "num_output_tokens": sum(r.num_output_tokens for r in ok),
        "ttft_ms": spread([r.ttft_s for r in ok if r.ttft_s is not None], 1e3),
        "tpot_ms": spread([r.tpot_s for r in ok if r.tpot_s is not None], 1e3),
        "itl_ms": spread(itl, 1e3),
        "e2e_ms": spread([r.e2e_s for r in ok], 1e3),
        "mean_acceptance_length": spread(accept_lengths)["median"] if accept_lengths else None,
        "wall_s": wall_s,
    }


async def _served_model(base_url: str, settings: LoadgenSettings) -> str:
    async with httpx.AsyncClient(timeout=settings.connect_timeout_s, trust_env=False) as client:
        resp = await client.get(f"{base_url}/v1/models")
        resp.raise_for_status()
        return resp.json()["data"][0]["id"]


def run_rung(base_url: str, model: str, workload: Workload, settings: LoadgenSettings, names: MetricNames,
             concurrency: int, num_speculative_tokens: int = 0,
             extra_body: Mapping[str, Any] | None = None) -> dict[str, Any]:
    check_loopback(base_url)
    budget = settings.max_rung_duration_s
    try:
        return asyncio.run(asyncio.wait_for(
            _rung(base_url, model, workload, settings, names, concurrency, num_speculative_tokens, extra_body or {}),
            budget))
    except (asyncio.TimeoutError, TimeoutError):
        return {"concurrency": concurrency, "status": "error", "output_tok_per_s": None,
                "message": f"rung exceeded max_rung_duration_s={budget:g}", "num_requests": 0}


def run_ladder(base_url: str, workload: Workload, settings: LoadgenSettings, names: MetricNames,
               num_speculative_tokens: int = 0, on_rung: Callable[[dict[str, Any]], None] = lambda r: None,
               alive: Callable[[], str | None] = lambda: None,
               extra_body: Mapping[str, Any] | None = None) -> LadderResult:
    """Every rung of `settings.concurrencies` in order. `alive()` returns why the engine is gone (or None);
    it is asked after a failed rung so the message can say the engine died."""
    check_loopback(base_url)
    base_url = base_url.rstrip("/")
    try:
        model = asyncio.run(_served_model(base_url, settings))
    except (httpx.HTTPError, OSError, KeyError, IndexError, ValueError) as exc:
        return LadderResult(model=None, message=f"GET {base_url}/v1/models failed: {type(exc).__name__}: {exc}")
    result = LadderResult(model=model)
    for c in settings.concurrencies:
        rung = run_rung(base_url, model, workload, settings, names, c, num_speculative_tokens, extra_body)
        if rung["status"] == "error":
            gone = alive()
            if gone:
                rung["message"] = f"{gone}; {rung['message']}"
        result.rungs.append(rung)
        on_rung(rung)
        if rung["status"] == "error" and settings.stop_on_error:
            result.message = f"stopped at concurrency {c}: {rung['message']}"
            break
    return result
