"""The stub's first-token delay (an engine's prefill): paid once per request, before its first chunk."""

from __future__ import annotations

import pytest

from conformance.loadgen import LoadgenSettings, MetricNames, Workload, run_ladder
from conformance.loadgen.stub_process import StubProcess
from conformance.loadgen.stub_server import StubConfig, StubServer

DELAY_S = 0.15


def _rung(base_url: str, n: int = 4, out: int = 8) -> dict:
    w = Workload(num_requests=n, prompt_tokens=8, output_tokens=out, seed=1, vocab_size=64)
    s = LoadgenSettings(concurrencies=(2,), num_warmup_waves=0, min_requests_per_slot=1)
    (r,) = run_ladder(base_url, w, s, MetricNames()).rungs
    assert r["status"] == "ok" and r["num_output_tokens"] == n * out
    return r


@pytest.mark.parametrize("step_delay_s", [0.0, 0.004])
def test_every_first_chunk_waits_the_delay_and_no_later_one_does(step_delay_s: float) -> None:
    with StubServer(step_delay_s=step_delay_s, first_token_delay_s=DELAY_S) as srv:
        r = _rung(srv.base_url)
    ttfts_ms = [rec["ttft_ms"] for rec in r["records"]]
    assert min(ttfts_ms) >= DELAY_S * 1e3
    # the gaps after the first chunk are the step delay's, not the first token's
    gaps_us = [b - a for rec in r["records"] for a, b in zip(rec["chunk_offsets_us"], rec["chunk_offsets_us"][1:])]
    assert len(gaps_us) == 4 * 7
    assert max(gaps_us) < DELAY_S * 1e6 / 2
    if step_delay_s:     # paced from the first chunk on (a gap's arrival jitters, their sum does not)
        assert sum(gaps_us) / len(gaps_us) >= step_delay_s * 1e6 * 0.9


def test_the_stub_process_passes_the_delay_on() -> None:
    with StubProcess(first_token_delay_s=DELAY_S) as stub:
        r = _rung(stub.base_url, n=2)
    assert min(rec["ttft_ms"] for rec in r["records"]) >= DELAY_S * 1e3


def test_a_negative_delay_is_refused() -> None:
    with pytest.raises(ValueError, match="first_token_delay_s"):
        StubConfig(first_token_delay_s=-0.1)
