"""The load generator against the checking stub server (a real HTTP server, real sockets)."""

from __future__ import annotations

import pytest

from conformance.loadgen import LoadgenSettings, MetricNames, Workload, run_ladder
from conformance.loadgen.client import OPENAI_COMPLETIONS, SGLANG_GENERATE
from conformance.loadgen.ladder import check_loopback
from conformance.loadgen.stub_server import StubServer

NAMES = MetricNames(accepted_tokens="stub:num_accepted_tokens_total", draft_tokens="stub:num_draft_tokens_total",
                    drafts="stub:num_drafts_total")


def _workload(**kw) -> Workload:
    return Workload(**{"num_requests": 6, "prompt_tokens": 8, "output_tokens": 12, "seed": 7, "vocab_size": 64, **kw})


@pytest.mark.parametrize("protocol", [OPENAI_COMPLETIONS, SGLANG_GENERATE])
@pytest.mark.parametrize("tokens_per_step", [1, 3])
def test_ladder_counts_and_acceptance(tokens_per_step: int, protocol: str) -> None:
    """Both request protocols (OpenAI completions; SGLang's native /generate, whose events carry the
    output ids so far and the counts in meta_info) give the same figures from the same server."""
    settings = LoadgenSettings(concurrencies=(1, 3), num_warmup_waves=1, min_requests_per_slot=2)
    w = _workload()
    with StubServer(tokens_per_step=tokens_per_step, num_speculative_tokens=4, step_delay_s=0.002) as srv:
        result = run_ladder(srv.base_url, w, settings, NAMES, num_speculative_tokens=4, protocol=protocol)
        st = srv.state
    assert result.message is None and [r["concurrency"] for r in result.rungs] == [1, 3]
    for r in result.rungs:
        n = settings.num_requests(r["concurrency"], w.num_requests)
        assert r["status"] == "ok" and r["num_requests"] == n and r["num_failed_requests"] == 0
        assert r["num_output_tokens"] == n * w.output_tokens
        assert r["mean_acceptance_length"] == pytest.approx(tokens_per_step)
        assert r["output_tok_per_s"] == pytest.approx(r["num_output_tokens"] / r["wall_s"])
        # chunks of tokens_per_step tokens: ceil(12 / tps) chunks -> that many - 1 gaps per request
        assert r["itl_ms"]["num_samples"] == n * (-(-w.output_tokens // tokens_per_step) - 1)
        assert r["ttft_ms"]["p10"] <= r["ttft_ms"]["median"] <= r["ttft_ms"]["p90"]
    # warm-up waves (c requests each) + measured requests; concurrency never exceeded the rung's
    assert st.num_requests == sum(c + settings.num_requests(c, w.num_requests) for c in (1, 3))
    assert st.max_in_flight <= 3 and st.violations == []


def test_prompts_are_seeded_and_distinct() -> None:
    w = _workload()
    assert w.prompt_token_ids("c1-r0", 0) == _workload().prompt_token_ids("c1-r0", 0)
    assert w.prompt_token_ids("c1-r0", 0) != w.prompt_token_ids("c1-r0", 1)
    assert w.prompt_token_ids("c1-r0", 0) != w.prompt_token_ids("c2-r0", 0)
    assert w.prompt_token_ids("c1-r0", 0) != _workload(seed=8).prompt_token_ids("c1-r0", 0)
    ids = w.prompt_token_ids("x", 3)
    assert len(ids) == w.prompt_tokens and all(2 <= t < w.vocab_size for t in ids)


def test_server_prompts_are_the_workload_prompts() -> None:
    w = _workload(num_requests=2)
    with StubServer() as srv:
        run_ladder(srv.base_url, w, LoadgenSettings(concurrencies=(1,), num_warmup_waves=0, min_requests_per_slot=1),
                   NAMES)
        prompts = srv.state.prompts
    assert prompts == [w.prompt_token_ids("c1-r0", i) for i in range(2)]


def test_explicit_prompts_are_replayed_as_given() -> None:
    given = ((5, 6, 7, 8, 9, 10, 11, 0), (63, 62, 61, 60, 59, 58, 57, 1))
    w = _workload(num_requests=3, prompts=[list(p) for p in given])
    assert w.prompts == given
    with StubServer() as srv:
        run_ladder(srv.base_url, w, LoadgenSettings(concurrencies=(1,), num_warmup_waves=1, min_requests_per_slot=1),
                   NAMES)
        prompts = srv.state.prompts
    # the warm-up request (index 0) and the three measured ones cycle through the given prompts
    assert prompts == [list(given[0]), list(given[0]), list(given[1]), list(given[0])]
    with pytest.raises(ValueError, match=r"workload.prompts\[1\]"):
        _workload(prompts=[[1] * 8, [1] * 7])
    with pytest.raises(ValueError, match=r"workload.prompts\[0\]"):
        _workload(prompts=[[64] * 8])


def test_dead_server_gives_error_rung_and_stops() -> None:
    with StubServer() as srv:
        url = srv.base_url
        settings = LoadgenSettings(concurrencies=(1, 2), num_warmup_waves=0, request_timeout_s=5)
        from conformance.loadgen.ladder import run_rung

        model = "stub"
    rung = run_rung(url, model, _workload(), settings, NAMES, 1)   # the server is gone now
    assert rung["status"] == "error" and rung["output_tok_per_s"] is None
    assert "ConnectError" in rung["message"] or "refused" in rung["message"].lower()
    result = run_ladder(url, _workload(), settings, NAMES, alive=lambda: "engine exited with code 1")
    assert result.rungs == [] and "v1/models" in result.message


@pytest.mark.parametrize("protocol", [OPENAI_COMPLETIONS, SGLANG_GENERATE])
def test_short_outputs_are_an_error(protocol: str) -> None:
    w = _workload()
    with StubServer(max_output_tokens=5) as srv:   # a server that ignores ignore_eos: it stops after 5 tokens
        result = run_ladder(srv.base_url, w, LoadgenSettings(concurrencies=(1, 2), num_warmup_waves=0), NAMES,
                            protocol=protocol)
    assert [r["status"] for r in result.rungs] == ["error"]
    assert "output tokens where 12 were asked" in result.rungs[0]["message"]


def test_loopback_only() -> None:
    check_loopback("http://127.0.0.1:1")
    check_loopback("http://localhost:1")
    with pytest.raises(ValueError, match="loopback"):
        check_loopback("http://10.0.0.1:8000")


def test_settings_validate() -> None:
    with pytest.raises(ValueError, match="concurrencies"):
        LoadgenSettings(concurrencies=(0,))
    with pytest.raises(ValueError, match="num_repeats"):
        LoadgenSettings(num_repeats=0)
    s = LoadgenSettings(min_requests_per_slot=2, max_num_requests_per_rung=10)
    assert s.num_requests(1, 4) == 4 and s.num_requests(4, 4) == 8 and s.num_requests(32, 4) == 10


def test_repeats_report_each_waves_throughput_and_median_ttft() -> None:
    settings = LoadgenSettings(concurrencies=(2,), num_warmup_waves=0, min_requests_per_slot=1, num_repeats=3)
    with StubServer(step_delay_s=0.002) as srv:
        (rung,) = run_ladder(srv.base_url, _workload(num_requests=2), settings, NAMES).rungs
    assert rung["status"] == "ok" and rung["num_requests"] == 6
    assert len(rung["output_tok_per_s_repeats"]) == len(rung["ttft_ms_median_repeats"]) == 3
    assert min(rung["ttft_ms_median_repeats"]) <= rung["ttft_ms"]["median"] <= max(rung["ttft_ms_median_repeats"])
    assert rung["ttft_ms"]["num_samples"] == 6
