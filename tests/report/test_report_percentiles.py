"""The report's latency-percentile charts, drawn from a real ladder's per-request records."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from conformance.documents import observation
from conformance.loadgen import LoadgenSettings, MetricNames, Workload, run_ladder
from conformance.loadgen.stats import quantile
from conformance.loadgen.stub_server import StubServer
from conformance.report import charts, latency, render

from .conftest import make_report

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def stub_rungs() -> list[dict]:
    w = Workload(num_requests=6, prompt_tokens=8, output_tokens=10, seed=1, vocab_size=64)
    s = LoadgenSettings(concurrencies=(1, 2), num_warmup_waves=0, min_requests_per_slot=1)
    with StubServer(step_delay_s=0.001) as srv:
        return run_ladder(srv.base_url, w, s, MetricNames()).rungs


def test_percentiles_recompute_from_records(stub_rungs) -> None:
    pts = latency.percentile_points(stub_rungs, "ttft_ms")
    assert sorted(pts) == ["p50", "p90", "p99"] and [x for x, _ in pts["p50"]] == [1.0, 2.0]
    ttfts = [d["ttft_ms"] for d in stub_rungs[1]["records"]]
    assert pts["p99"][1][1] == pytest.approx(quantile(ttfts, 0.99))
    tpot = latency.percentile_points(stub_rungs, "tpot_ms")
    assert tpot["p50"][0][1] == pytest.approx(stub_rungs[0]["tpot_ms"]["median"], rel=1e-3)
    assert all(a <= b for (_, a), (_, b) in zip(tpot["p50"], tpot["p99"]))


def test_percentiles_fall_back_to_the_rung_summary() -> None:
    rungs = [{"concurrency": 4, "status": "ok", "output_tok_per_s": 1.0,
              "ttft_ms": {"median": 2.0, "p10": 1.0, "p90": 3.0, "num_samples": 5}},
             {"concurrency": 8, "status": "error", "output_tok_per_s": None}]
    assert latency.percentile_points(rungs, "ttft_ms") == {"p50": [(4.0, 2.0)], "p90": [(4.0, 3.0)]}
    with pytest.raises(ValueError, match="metric"):
        latency.percentile_points(rungs, "e2e_ms")


def test_report_draws_ttft_and_tpot_percentiles_per_engine(stub_rungs, dom) -> None:
    obs = observation.new("case-a", "reference", "1.0", "run", "h200")
    obs["throughput"] = {"rungs": stub_rungs}
    observation.validate(obs, "test")   # rungs with records fit the observation schema
    page = dom(render.render_html(make_report([obs])))
    (case_a,) = page.find_all("section", cls="case", data_case="case-a")
    lines = case_a.find_all("polyline", cls="percentile-series")
    assert [p.attrs["data-engine"] for p in lines] == ["reference p50", "reference p90", "reference p99"] * 2
    assert all(p.attrs["data-num-points"] == "2" for p in lines)


def test_percentile_chart_escapes_and_names_its_series() -> None:
    svg = ET.fromstring(str(charts.percentile_chart([("<x> p50", [(1, 2.0), (2, 3.0)])], "ttft_ms")))
    (line,) = [p for p in svg.iter(f"{SVG}polyline")]
    assert line.get("data-engine") == "<x> p50" and "ttft-ms" in svg.get("class")
