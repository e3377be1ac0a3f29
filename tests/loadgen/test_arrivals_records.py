"""Arrival schedules and the per-request record format (pure functions)."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from conformance.loadgen.arrivals import arrival_offsets_s
from conformance.loadgen.record import RequestRecord
from conformance.loadgen.rung_stats import wave_figures


def test_constant_arrivals_are_exact() -> None:
    assert arrival_offsets_s(4, 2.0, "constant") == [0.0, 0.5, 1.0, 1.5]


@given(st.floats(min_value=1, max_value=1e4), st.integers(min_value=0, max_value=5),
       st.sampled_from([0.5, 1.0, 3.0]))
def test_poisson_arrivals_are_seeded_and_non_decreasing(rate: float, seed: int, burstiness: float) -> None:
    a = arrival_offsets_s(50, rate, "poisson", burstiness, seed)
    assert a == arrival_offsets_s(50, rate, "poisson", burstiness, seed)
    assert a[0] == 0.0 and all(x <= y for x, y in zip(a, a[1:]))


def test_poisson_mean_gap_is_one_over_rate() -> None:
    a = arrival_offsets_s(20000, 100.0, "poisson", seed=1)
    assert a[-1] / (len(a) - 1) == pytest.approx(0.01, rel=0.03)
    assert arrival_offsets_s(5, 100.0, seed=1) != arrival_offsets_s(5, 100.0, seed=2)


def test_arrivals_validate() -> None:
    with pytest.raises(ValueError, match="request_rate_per_s"):
        arrival_offsets_s(3, 0.0)
    with pytest.raises(ValueError, match="burstiness"):
        arrival_offsets_s(3, 1.0, burstiness=0)


def _rec(i: int, start: float, scheduled: float | None, queued: float = 0.0) -> RequestRecord:
    return RequestRecord(index=i, start_s=start, end_s=start + 0.5, ttft_s=0.1,
                         chunk_times_s=(start + 0.1, start + 0.3, start + 0.5), num_output_tokens=3,
                         num_prompt_tokens=4, error=None, scheduled_s=scheduled, worker=1, queued_s=queued)


def test_record_round_trips_through_its_disk_format() -> None:
    r = _rec(7, 10.25, 10.2, queued=0.01)
    d = r.to_json(t0_s=10.0)
    assert d["start_ms"] == pytest.approx(250.0) and d["scheduled_ms"] == pytest.approx(200.0)
    assert d["chunk_offsets_us"] == [100000, 300000, 500000] and d["worker"] == 1
    back = RequestRecord.from_json(d, t0_s=10.0)
    assert back.index == 7 and back.start_s == pytest.approx(10.25) and back.tpot_s == pytest.approx(0.2)
    assert back.itl_s() == pytest.approx([0.2, 0.2]) and back.client_lag_s == pytest.approx(0.04)


def test_tpot_stops_at_the_last_text_chunk_as_vllm_bench_does() -> None:
    # the usage chunk and [DONE] arrive 0.4 s after the last token: in e2e, not in TPOT (vLLM's latency
    # is the last chunk with choices)
    r = RequestRecord(index=0, start_s=1.0, end_s=2.0, ttft_s=0.1, chunk_times_s=(1.1, 1.3, 1.6),
                      num_output_tokens=3, num_prompt_tokens=4, error=None)
    assert r.e2e_s == pytest.approx(1.0) and r.last_chunk_s == pytest.approx(0.6)
    assert r.tpot_s == pytest.approx(0.25)


def test_saturation_names_the_client_or_the_cap() -> None:
    # asked every 10 ms, sent every 20 ms: short of the schedule by half
    late_client = [_rec(i, i * 0.02, i * 0.01) for i in range(10)]
    assert wave_figures(late_client, 0.0, 100.0)["saturated"] == "client"
    queued = [_rec(i, i * 0.02, i * 0.01, queued=i * 0.01) for i in range(10)]
    assert wave_figures(queued, 0.0, 100.0)["saturated"] == "concurrency_cap"
    on_time = [_rec(i, i * 0.01, i * 0.01) for i in range(10)]
    f = wave_figures(on_time, 0.0, 100.0)
    assert f["saturated"] is None and f["achieved_request_per_s"] == pytest.approx(100.0)
    # a loop that woke 20 ms late is a saturated client in closed loop too
    assert wave_figures(on_time, 0.0, None, loop_lag_s=[0.02] * 10)["saturated"] == "client"


def test_saturation_message_says_whether_the_rate_held() -> None:
    from conformance.loadgen.rung_stats import saturation_message

    assert "woke over 5 ms late" in saturation_message("client", 1000.0, 999.0)
    assert "add client processes" in saturation_message("client", 1000.0, 500.0)
    assert "woke over 5 ms late" in saturation_message("client", None, None)
    assert "engine is saturated" in saturation_message("concurrency_cap", 100.0, 50.0)
    assert saturation_message(None, 100.0, 100.0) is None
