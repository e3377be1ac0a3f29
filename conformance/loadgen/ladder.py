"""Ladders: rungs of streaming requests against one server, closed-loop or open-loop.

Contract: `run_ladder(...)` returns one rung dict per concurrency (closed loop) or request rate
(open loop, `settings.request_rates_per_s`) it reached, in order. A rung is `ok` when every
measured request streamed its full output; otherwise `error` with the first failure as `message`,
and (with `settings.stop_on_error`) the ladder stops there, keeping the rungs already measured.
Nothing here raises for what the server does. Rung fields:

    mode (closed / open), concurrency (closed: the rung's; open: the cap, else the requests sent),
    status, message, output_tok_per_s (median over repeats), output_tok_per_s_repeats,
    ttft_ms_median_repeats, tpot_ms_median_repeats, itl_ms_median_repeats (each repeat's median: a
    first-seen-shape stall shows in one repeat only; the live parity intervals are computed over these),
    request_per_s, goodput_request_per_s (None without SLOs), num_requests, num_failed_requests,
    num_output_tokens, ttft_ms / tpot_ms / itl_ms / e2e_ms: {median, p10, p90, p99, num_samples} over
    every measured request, mean_acceptance_length (from the engine's /metrics counters over the
    measured requests; None when the engine exposes none) and mean_acceptance_length_repeats (per
    wave), accepted_per_pos (per draft position, the fraction of drafts accepted there, averaged over
    waves; None without the engine's per-position counter), wall_s (measured wall time, summed over
    repeats), client {num_processes, event_loop}, records (every measured request, `record`'s disk
    format, with its `repeat`) and repeats_t0_wall_time_ns (each repeat's start in calendar time).
    Open loop adds request_rate_per_s, arrival (poisson / constant), burstiness, max_concurrency
    (0: no cap), scheduled_request_per_s, achieved_request_per_s (the send rate, from the records'
    start times), client_lag_ms, queued_ms, saturated (None / client / concurrency_cap),
    saturation_message.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NamedTuple
from urllib.parse import urlsplit

import httpx

from conformance.loadgen import event_loop
from conformance.loadgen.arrivals import arrival_offsets_s
from conformance.loadgen.client import OPENAI_COMPLETIONS
from conformance.loadgen.driver import Job, JobResult
from conformance.loadgen.prometheus import parse_labelled, parse_samples
from conformance.loadgen.record import RequestRecord
from conformance.loadgen.rung_stats import saturation_message, wave_figures
from conformance.loadgen.settings import LOOPBACK_HOSTS, LoadgenSettings, MetricNames
from conformance.loadgen.stats import spread
from conformance.loadgen.workers import ClientPool, split_closed, split_open
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


class Scrape(NamedTuple):
    samples: dict[str, float]           # every metric, summed over label sets
    per_pos: dict[int, float]           # accepted drafts by draft position (MetricNames.accepted_tokens_per_pos)


def _scrape(base_url: str, names: MetricNames) -> Scrape | None:
    try:
        resp = httpx.get(f"{base_url}/metrics", timeout=10.0, trust_env=False)
    except (httpx.HTTPError, OSError):
        return None
    if resp.status_code != 200:
        return None
    per_pos: dict[int, float] = {}
    if names.accepted_tokens_per_pos:
        for key, value in parse_labelled(resp.text, names.accepted_tokens_per_pos, "position").items():
            if key.isdigit():
                per_pos[int(key)] = value
    return Scrape(parse_samples(resp.text), per_pos)


def _num_drafts(before: dict, after: dict, names: MetricNames, k: int) -> float | None:
    """Verify steps that checked a draft over the interval: d(drafts), else d(draft tokens) / k."""
    if names.drafts and names.drafts in after:
        return after[names.drafts] - before.get(names.drafts, 0.0)
    if names.draft_tokens and names.draft_tokens in after and k > 0:
        return (after[names.draft_tokens] - before.get(names.draft_tokens, 0.0)) / k
    return None


def _accepted_per_pos(before: Scrape | None, after: Scrape | None, names: MetricNames, k: int) -> list[float] | None:
    """Per draft position i (0 .. k-1): the fraction of drafts whose position i was accepted over the interval
    (vLLM's per-position acceptance rate); None when the engine exposes no per-position counter."""
    if before is None or after is None or not after.per_pos or k <= 0:
        return None
    drafts = _num_drafts(before.samples, after.samples, names, k)
    if not drafts or drafts <= 0:
        return None
    return [(after.per_pos.get(i, 0.0) - before.per_pos.get(i, 0.0)) / drafts for i in range(k)]


def _acceptance_length(before: Scrape | None, after: Scrape | None, names: MetricNames, k: int) -> float | None:
    if after is not None and names.acceptance_length_gauge and not names.accepted_tokens:
        return after.samples.get(names.acceptance_length_gauge)
    if before is None or after is None or not names.accepted_tokens or names.accepted_tokens not in after.samples:
        return None   # a counter the engine did not report (or reported as +Inf, NaN: skipped) is not 0
    accepted = after.samples.get(names.accepted_tokens, 0.0) - before.samples.get(names.accepted_tokens, 0.0)
    drafts = _num_drafts(before.samples, after.samples, names, k)
    if drafts is None:
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


def _job(base_url: str, model: str, workload: Workload, settings: LoadgenSettings, tag: str, indices: list[int],
         concurrency: int, start_at_s: float, extra_body: Mapping[str, Any], worker: int,
         offsets_s: list[float] | None = None, protocol: str = OPENAI_COMPLETIONS) -> Job:
    wl = {"num_requests": workload.num_requests, "prompt_tokens": workload.prompt_tokens,
          "output_tokens": workload.output_tokens, "seed": workload.seed, "vocab_size": workload.vocab_size,
          "prompts": [list(p) for p in workload.prompts]}
    return Job(base_url=base_url, model=model, workload=wl, tag=tag, indices=indices, concurrency=concurrency,
               start_at_s=start_at_s, offsets_s=offsets_s, temperature=settings.temperature,
               extra_body=dict(extra_body), protocol=protocol, request_timeout_s=settings.request_timeout_s,
               connect_timeout_s=settings.connect_timeout_s, stop_on_error=settings.stop_on_error, worker=worker)


def _closed_wave(pool: ClientPool, base_url: str, model: str, workload: Workload, settings: LoadgenSettings,
                 concurrency: int, tag: str, n: int, extra_body: Mapping[str, Any], protocol: str) -> JobResult:
    t0 = pool.start_at_s()
    parts = split_closed(range(n), concurrency, pool.num_processes if pool.procs else 1)
    jobs = [_job(base_url, model, workload, settings, tag, idx, slots, t0, extra_body, w, protocol=protocol)
            for w, (idx, slots) in enumerate(parts)]
    return pool.run(jobs)


def _open_wave(pool: ClientPool, base_url: str, model: str, workload: Workload, settings: LoadgenSettings,
               rate: float, tag: str, n: int, extra_body: Mapping[str, Any], protocol: str) -> JobResult:
    t0 = pool.start_at_s()
    offsets = arrival_offsets_s(n, rate, settings.arrival, settings.burstiness, seed=settings.arrival_seed)
    parts = split_open(list(range(n)), offsets, settings.max_concurrency, pool.num_processes if pool.procs else 1)
    jobs = [_job(base_url, model, workload, settings, tag, idx, cap, t0, extra_body, w, offs, protocol)
            for w, (idx, offs, cap) in enumerate(parts)]
    return pool.run(jobs)


def _wall_time_ns(t0_s: float) -> int:
    return time.time_ns() + int((t0_s - time.perf_counter()) * 1e9)


def _rung(pool: ClientPool, base_url: str, model: str, workload: Workload, settings: LoadgenSettings,
          names: MetricNames, concurrency: int, k: int, extra_body: Mapping[str, Any],
          rate: float | None, protocol: str) -> dict[str, Any]:
    n = settings.num_requests(concurrency if rate is None else max(1, settings.max_concurrency),
                              workload.num_requests)
    warm_c = concurrency if rate is None else max(1, min(settings.max_concurrency or 4, n))
    key = f"c{concurrency}" if rate is None else f"rate{rate:g}"
    measured: list[RequestRecord] = []
    disk: list[dict[str, Any]] = []
    t0_walls: list[int] = []
    waves: list[dict[str, Any]] = []
    accept_lengths: list[float] = []
    accepted_per_pos: list[list[float]] = []     # per measured wave: the acceptance rate at each draft position
    loop_lags: list[float] = []
    message: str | None = None
    started = time.perf_counter()
    for rep in range(settings.num_repeats):
        for w in range(settings.num_warmup_waves):
            warm = _closed_wave(pool, base_url, model, workload, settings, warm_c, f"warmup-{key}-r{rep}-w{w}",
                                warm_c, extra_body, protocol)
            message = _first_failure(warm.records, workload.output_tokens)
            if message:
                message = f"warm-up {message}"
                break
        if message:
            break
        before = _scrape(base_url, names)
        tag = f"{key}-r{rep}"
        if rate is None:
            res = _closed_wave(pool, base_url, model, workload, settings, concurrency, tag, n, extra_body, protocol)
        else:
            res = _open_wave(pool, base_url, model, workload, settings, rate, tag, n, extra_body, protocol)
        records, t0 = res.records, res.t0_s
        loop_lags += res.loop_lag_s
        after = _scrape(base_url, names)
        measured += records
        t0_walls.append(_wall_time_ns(t0))
        if settings.keep_records:
            disk += [{**r.to_json(t0), "repeat": rep} for r in records]
        message = _first_failure(records, workload.output_tokens)
        if message:
            break
        waves.append(wave_figures(records, t0, rate, settings.slo_ttft_ms, settings.slo_tpot_ms, res.loop_lag_s))
        a = _acceptance_length(before, after, names, k)
        if a is not None:
            accept_lengths.append(a)
        per_pos = _accepted_per_pos(before, after, names, k)
        if per_pos is not None:
            accepted_per_pos.append(per_pos)
        if time.perf_counter() - started > settings.max_rung_duration_s:
            message = f"rung exceeded max_rung_duration_s={settings.max_rung_duration_s:g}"
            break
    ok = [r for r in measured if r.ok]
    itl = [x for r in ok for x in r.itl_s()]
    wall_s = sum(w["wall_s"] for w in waves)
    tok_per_s = [w["output_tok_per_s"] for w in waves if w["output_tok_per_s"] is not None]
    per_wave_ms = _per_wave_medians_ms(measured, n, len(waves))
    rung: dict[str, Any] = {
        "mode": "closed" if rate is None else "open",
        "concurrency": concurrency,
        "status": "error" if message else "ok",
        "message": message,
        "output_tok_per_s": None if message or not tok_per_s else spread(tok_per_s)["median"],
        "output_tok_per_s_repeats": tok_per_s,
        "ttft_ms_median_repeats": per_wave_ms["ttft"],
        "tpot_ms_median_repeats": per_wave_ms["tpot"],
        "itl_ms_median_repeats": per_wave_ms["itl"],
        "request_per_s": None if message or wall_s <= 0 else len(ok) / wall_s,
        "goodput_request_per_s": _median([w["goodput_request_per_s"] for w in waves]),
        "num_requests": len(measured),
        "num_failed_requests": len(measured) - len(ok),
        "num_output_tokens": sum(r.num_output_tokens for r in ok),
        "ttft_ms": spread([r.ttft_s for r in ok if r.ttft_s is not None], 1e3),
        "tpot_ms": spread([r.tpot_s for r in ok if r.tpot_s is not None], 1e3),
        "itl_ms": spread(itl, 1e3),
        "e2e_ms": spread([r.e2e_s for r in ok], 1e3),
        "mean_acceptance_length": spread(accept_lengths)["median"] if accept_lengths else None,
        "mean_acceptance_length_repeats": accept_lengths,
        "accepted_per_pos": ([sum(w[i] for w in accepted_per_pos) / len(accepted_per_pos) for i in range(k)]
                             if accepted_per_pos else None),
        "wall_s": wall_s,
        "client": {"num_processes": pool.num_processes, "event_loop": event_loop.loop_name()},
        "repeats_t0_wall_time_ns": t0_walls,
        "loop_lag_ms": spread(loop_lags, 1e3),
        "saturated": next((w["saturated"] for w in waves if w["saturated"]), None),
    }
    rung["saturation_message"] = saturation_message(rung["saturated"], rate, _median(
        [w.get("achieved_request_per_s") for w in waves]))
    if rate is not None:
        for f in ("scheduled_request_per_s", "achieved_request_per_s"):
            rung[f] = _median([w[f] for w in waves])
        rung.update(request_rate_per_s=rate, arrival=settings.arrival, burstiness=settings.burstiness,
                    max_concurrency=settings.max_concurrency)
        rung["client_lag_ms"] = spread([r.client_lag_s for r in measured], 1e3)
        rung["queued_ms"] = spread([r.queued_s for r in measured], 1e3)
    if settings.keep_records:
        rung["records"] = disk
    return rung


def _per_wave_medians_ms(measured: list[RequestRecord], n: int, num_waves: int) -> dict[str, list[float]]:
    """Each measured wave's median TTFT, TPOT and ITL in ms (waves of `n` records, in order): one sample
    per wave, the unit the live parity intervals are computed over."""
    out: dict[str, list[float]] = {"ttft": [], "tpot": [], "itl": []}
    for rep in range(num_waves):
        wave = [r for r in measured[rep * n:(rep + 1) * n] if r.ok]
        for key, values in (("ttft", [r.ttft_s for r in wave if r.ttft_s is not None]),
                            ("tpot", [r.tpot_s for r in wave if r.tpot_s is not None]),
                            ("itl", [x for r in wave for x in r.itl_s()])):
            s = spread(values, 1e3)
            if s:
                out[key].append(s["median"])
    return out


def _median(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return spread(xs)["median"] if xs else None


def _served_model(base_url: str, settings: LoadgenSettings) -> str:
    resp = httpx.get(f"{base_url}/v1/models", timeout=settings.connect_timeout_s, trust_env=False)
    resp.raise_for_status()
    doc = resp.json()
    data = doc.get("data") if isinstance(doc, dict) else None
    first = data[0] if isinstance(data, list) and data else None
    model = first.get("id") if isinstance(first, dict) else None
    if not isinstance(model, str) or not model:
        raise ValueError(f"the answer names no served model (want {{\"data\": [{{\"id\": NAME}}, ...]}}, got "
                         f"{resp.text[:200]!r})")
    return model


def _pool(settings: LoadgenSettings, concurrency: int, rate: float | None) -> ClientPool:
    return ClientPool(settings.auto_num_processes(concurrency, rate), settings.client_cpus or None)


def run_rung(base_url: str, model: str, workload: Workload, settings: LoadgenSettings, names: MetricNames,
             concurrency: int, num_speculative_tokens: int = 0, extra_body: Mapping[str, Any] | None = None,
             request_rate_per_s: float | None = None, protocol: str = OPENAI_COMPLETIONS) -> dict[str, Any]:
    """One rung: closed loop at `concurrency`, or open loop at `request_rate_per_s` (cap: `concurrency`);
    requests in `protocol` (`client.REQUEST_PROTOCOLS`)."""
    check_loopback(base_url)
    base_url = base_url.rstrip("/")
    with _pool(settings, concurrency, request_rate_per_s) as pool:
        return _rung(pool, base_url, model, workload, settings, names, concurrency, num_speculative_tokens,
                     extra_body or {}, request_rate_per_s, protocol)


def run_ladder(base_url: str, workload: Workload, settings: LoadgenSettings, names: MetricNames,
               num_speculative_tokens: int = 0, on_rung: Callable[[dict[str, Any]], None] = lambda r: None,
               alive: Callable[[], str | None] = lambda: None,
               extra_body: Mapping[str, Any] | None = None, protocol: str = OPENAI_COMPLETIONS) -> LadderResult:
    """Every rung of `settings.concurrencies` (or `settings.request_rates_per_s`) in order. `alive()` returns
    why the engine is gone (or None); it is asked after a failed rung so the message can say the engine died."""
    check_loopback(base_url)
    base_url = base_url.rstrip("/")
    try:
        model = _served_model(base_url, settings)
    except (httpx.HTTPError, OSError, KeyError, IndexError, ValueError) as exc:
        return LadderResult(model=None, message=f"GET {base_url}/v1/models failed: {type(exc).__name__}: {exc}")
    result = LadderResult(model=model)
    if settings.open_loop:
        steps = [(settings.max_concurrency or settings.num_requests(1, workload.num_requests), float(r))
                 for r in settings.request_rates_per_s]
    else:
        steps = [(c, None) for c in settings.concurrencies]
    for c, rate in steps:
        try:
            rung = run_rung(base_url, model, workload, settings, names, c, num_speculative_tokens, extra_body, rate,
                            protocol)
        except Exception as exc:  # noqa: BLE001  an answer nothing above foresaw: this rung fails, the rest stand
            rung = {"mode": "closed" if rate is None else "open", "concurrency": c, "status": "error",
                    "output_tok_per_s": None, "wall_s": None,
                    "message": f"the rung could not be measured: {type(exc).__name__}: {str(exc)[:500]}"}
            if rate is not None:
                rung["request_rate_per_s"] = rate
        if rung["status"] == "error":
            gone = alive()
            if gone:
                rung["message"] = f"{gone}; {rung['message']}"
        result.rungs.append(rung)
        on_rung(rung)
        if rung["status"] == "error" and settings.stop_on_error:
            where = f"concurrency {c}" if rate is None else f"request rate {rate:g}/s"
            result.message = f"stopped at {where}: {rung['message']}"
            break
    return result
