"""The report as a real browser renders it (headless Chromium): structure, charts, and no injection."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from conformance.report.render import write_html


def check_page(page, report) -> None:
    """Matrix: one cell per (case, engine). Per ok case: one ledger bar per engine with a bound line,
    one trace series per engine that has a trace."""
    cells = page.find_all("td", cls="cell")
    assert sorted((c.attrs["data-case"], c.attrs["data-engine"]) for c in cells) == sorted(
        (c.id, e.name) for c in report.cases for e in report.matrix_engines)
    for case in report.cases:
        (section,) = page.find_all("section", cls="case", data_case=case.id)
        ok = [e.name for e in report.matrix_engines
              if (report.observation(case.id, e.name) or {}).get("status") == "ok"]
        bars = section.find_all("g", cls="ledger-bar")
        assert [b.attrs["data-engine"] for b in bars] == ok
        for b in bars:
            assert len(b.find_all("line", cls="bound-line")) == 1
        traced = [e for e in ok if (report.observation(case.id, e).get("trace") or {}).get("steps")]
        assert [s.attrs["data-engine"] for s in section.find_all("polyline", cls="trace-series")] == traced


def test_rendered_in_chromium(three_engine_report, chromium, dom, tmp_path, screenshot_dir):
    index = write_html(three_engine_report, tmp_path / "index.html")
    page = dom(chromium.dump_dom(index))
    check_page(page, three_engine_report)
    # The refusal's markup is text: no script element was injected, and the text reads as written.
    assert not page.find_all("script")
    (msg,) = page.find_all("pre", cls="message", data_engine="reference")
    assert msg.text() == "<script>alert(1)</script> no room"
    assert not [b for b in page.find_all("b") if "burned" in b.text()]
    (err,) = page.find_all("pre", cls="message", data_engine="sglang")
    assert err.text() == "adapter crashed & <b>burned</b>"
    chromium.screenshot(index, screenshot_dir / "report-hand-written.png")


@pytest.mark.oracle
def test_report_of_a_real_run_in_chromium(chromium, dom, tmp_path, screenshot_dir):
    """`conformance run` on the reference and vLLM 0.33.0 for one tiny case, rendered in Chromium."""
    from conformance.run.execute import RunOptions, run_job
    from conformance.run.rundir import load_report

    rc = run_job(RunOptions(case_patterns=("tiny-dflash-c4-k8", "seed-draft-kv-c8"), engines="reference,vllm",
                            reports_root=tmp_path / "reports"), Console(file=open("/dev/null", "w")))
    run_dir = (tmp_path / "reports" / "latest").resolve()
    report = load_report(run_dir)
    assert rc == (1 if any(v.failed for v in report.verdicts) else 0)
    assert {e.name for e in report.matrix_engines} == {"reference", "vllm"}, report.engines
    page = dom(chromium.dump_dom(run_dir / "index.html"))
    check_page(page, report)
    (section,) = page.find_all("section", cls="case", data_case="tiny-dflash-c4-k8")
    assert len(section.find_all("polyline", cls="trace-series")) == 2
    chromium.screenshot(run_dir / "index.html", screenshot_dir / "report-real-run.png")
    assert Path(screenshot_dir / "report-real-run.png").stat().st_size > 10_000
