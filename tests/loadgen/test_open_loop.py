"""Open-loop rungs against the checking stub server: schedule, cap, records, goodput, saturation."""

from __future__ import annotations

import pytest

from conformance.loadgen import LoadgenSettings, MetricNames, Workload, run_ladder
from conformance.loadgen.arrivals import arrival_offsets_s
from conformance.loadgen.record import RequestRecord
from conformance.loadgen.stats import spread
from conformance.loadgen.stub_server import StubServer


def _workload(n: int = 20, out: int = 12) -> Workload:
    return Workload(num_requests=n, prompt_tokens=8, output_tokens=out, seed=3, vocab_size=64)


def test_open_loop_follows_its_schedule_and_keeps_every_record() -> None:
    s = LoadgenSettings(request_rates_per_s=(200.0,), arrival="constant", num_warmup_waves=1, min_requests_per_slot=1)
    with StubServer() as srv:
        result = run_ladder(srv.base_url, _workload(), s, MetricNames())
        prompts = srv.state.prompts
    (r,) = result.rungs
    assert r["mode"] == "open" and r["status"] == "ok" and r["request_rate_per_s"] == 200.0
    assert r["num_requests"] == 20 and len(r["records"]) == 20
    # the arrival instants are the schedule's, exactly (constant: 5 ms apart)
    assert [rec["scheduled_ms"] for rec in r["records"]] == pytest.approx(
        [o * 1e3 for o in arrival_offsets_s(20, 200.0, "constant")], abs=1e-3)
    assert all(rec["start_ms"] >= rec["scheduled_ms"] for rec in r["records"])
    assert r["scheduled_request_per_s"] == pytest.approx(200.0)
    # the measured prompts are the workload's, after the warm-up wave's
    assert prompts[-20:] == [_workload().prompt_token_ids("rate200-r0", i) for i in range(20)]
    # percentiles recompute from the records
    recs = [RequestRecord.from_json(d) for d in r["records"]]
    assert spread([x.ttft_s for x in recs], 1e3)["median"] == pytest.approx(r["ttft_ms"]["median"], rel=1e-3)
    assert sum(x.num_output_tokens for x in recs) == r["num_output_tokens"]


def test_the_cap_bounds_in_flight_requests_and_queueing_is_the_engines() -> None:
    # 12 tokens at 5 ms a step: 60 ms a request, asked every 10 ms with one slot -> the server is the limit
    s = LoadgenSettings(request_rates_per_s=(100.0,), arrival="constant", max_concurrency=1, num_warmup_waves=0)
    with StubServer(step_delay_s=0.005) as srv:
        (r,) = run_ladder(srv.base_url, _workload(n=8), s, MetricNames()).rungs
        max_in_flight = srv.state.max_in_flight
    assert r["status"] == "ok" and r["concurrency"] == 1 and max_in_flight == 1
    assert r["queued_ms"]["p90"] > 0
    assert r["saturated"] == "concurrency_cap" and "engine is saturated" in r["saturation_message"]


def test_goodput_counts_requests_within_the_slos() -> None:
    base = dict(concurrencies=(2,), num_warmup_waves=0, min_requests_per_slot=1)
    with StubServer(step_delay_s=0.002) as srv:
        (loose,) = run_ladder(srv.base_url, _workload(n=6), LoadgenSettings(**base, slo_tpot_ms=1e4),
                              MetricNames()).rungs
        (tight,) = run_ladder(srv.base_url, _workload(n=6), LoadgenSettings(**base, slo_tpot_ms=1e-3),
                              MetricNames()).rungs
        (none,) = run_ladder(srv.base_url, _workload(n=6), LoadgenSettings(**base), MetricNames()).rungs
    assert loose["goodput_request_per_s"] == pytest.approx(loose["request_per_s"])
    assert tight["goodput_request_per_s"] == 0.0
    assert none["goodput_request_per_s"] is None


def test_open_loop_settings_validate() -> None:
    with pytest.raises(ValueError, match="request_rates_per_s"):
        LoadgenSettings(request_rates_per_s=(0.0,))
    with pytest.raises(ValueError, match="arrival"):
        LoadgenSettings(arrival="bursty")
    with pytest.raises(ValueError, match="max_concurrency"):
        LoadgenSettings(max_concurrency=-1)
    with pytest.raises(ValueError, match="slo_ttft_ms"):
        LoadgenSettings(slo_ttft_ms=0)
