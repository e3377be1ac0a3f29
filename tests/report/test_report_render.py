"""The HTML report: one self-contained page, its matrix, charts, tables and escaping."""

from __future__ import annotations

import re

from conformance.checks.verdicts import Verdict
from conformance.report import render
from conformance.report.model import cell_outcome, failed_run, outcome_counts
from conformance.run.session import judge


def test_matrix_has_one_cell_per_case_and_engine(three_engine_report, dom):
    page = dom(render.render_html(three_engine_report))
    cells = page.find_all("td", cls="cell")
    pairs = [(c.attrs["data-case"], c.attrs["data-engine"]) for c in cells]
    expected = [(c.id, e.name) for c in three_engine_report.cases for e in three_engine_report.matrix_engines]
    assert pairs == expected
    for c in cells:
        assert c.attrs["data-outcome"] == cell_outcome(three_engine_report, c.attrs["data-case"], c.attrs["data-engine"])
        assert c.text().strip() == c.attrs["data-outcome"]
    outcomes = {(c.attrs["data-case"], c.attrs["data-engine"]): c.attrs["data-outcome"] for c in cells}
    assert outcomes[("case-b", "reference")] == "refused"
    assert outcomes[("case-b", "sglang")] == "error"


def test_failed_verdict_turns_the_cell_to_fail(three_engine_report, dom):
    from dataclasses import replace

    bad = Verdict("memory.inside_bound", "sglang", "case-a", "fail", "draft KV outside the bound", ("draft_kv",))
    report = replace(three_engine_report, verdicts=(bad,))
    assert cell_outcome(report, "case-a", "sglang") == "fail"
    assert failed_run(report)
    page = dom(render.render_html(report))
    (cell,) = page.find_all("td", cls="cell", data_case="case-a", data_engine="sglang")
    assert cell.attrs["data-outcome"] == "fail"
    (row,) = page.find_all("tr", cls="verdict", data_check="memory.inside_bound")
    assert "draft KV outside the bound" in row.text()
    assert outcome_counts(report)["fail"] == 1


def test_case_section_charts_and_tables(three_engine_report, dom):
    page = dom(render.render_html(three_engine_report))
    (case_a,) = page.find_all("section", cls="case", data_case="case-a")
    bars = case_a.find_all("g", cls="ledger-bar")
    assert [b.attrs["data-engine"] for b in bars] == ["reference", "vllm", "sglang"]
    assert all(b.find_all("line", cls="bound-line") for b in bars)
    (outside,) = case_a.find_all("rect", cls="outside-bound")
    assert outside.attrs["data-category"] == "draft_kv"
    assert outside in bars[2].iter()
    series = case_a.find_all("polyline", cls="trace-series")
    assert [s.attrs["data-engine"] for s in series] == ["reference", "vllm", "sglang"]
    ladder = case_a.find_all("polyline", cls="ladder-series")
    assert [s.attrs["data-engine"] for s in ladder] == ["reference", "vllm"]   # sglang has no run observation
    # Budgets side by side; max_concurrency differs on sglang only, and is marked there.
    (seats,) = case_a.find_all("tr", data_field="max_concurrency")
    marked = [td.attrs["data-engine"] for td in seats.find_all("td", cls="differs")]
    assert marked == ["sglang"]
    (budget_row,) = case_a.find_all("tr", data_field="max_num_scheduled_tokens")
    assert not budget_row.find_all("td", cls="differs")
    assert case_a.find_all("details", cls="provenance")
    # The refused / errored case has no charts, and says why.
    (case_b,) = page.find_all("section", cls="case", data_case="case-b")
    assert not case_b.find_all("svg")
    assert "not enough KV cache for 1 sequence" in case_b.text()


def test_messages_are_text_not_markup(three_engine_report, dom):
    html = render.render_html(three_engine_report)
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    page = dom(html)
    assert not page.find_all("script")
    assert "<b>burned</b>" not in html and "&lt;b&gt;burned&lt;/b&gt;" in html
    (msg,) = page.find_all("pre", cls="message", data_engine="reference")
    assert msg.text() == "<script>alert(1)</script> no room"


def test_self_contained_page(three_engine_report):
    html = render.render_html(three_engine_report)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    assert "<link" not in html and "@import" not in html
    assert "<style>" in html


def test_interrupted_report_marks_not_run(obs_factory, report_factory, dom):
    report = report_factory([obs_factory("reference", "case-a")], engines=["reference", "vllm"],
                            case_ids=["case-a", "case-b"], interrupted=True)
    page = dom(render.render_html(report))
    assert page.find_all(id="interrupted")
    outcomes = {(c.attrs["data-case"], c.attrs["data-engine"]): c.attrs["data-outcome"]
                for c in page.find_all("td", cls="cell")}
    assert outcomes == {("case-a", "reference"): "pass", ("case-a", "vllm"): "not run",
                        ("case-b", "reference"): "not run", ("case-b", "vllm"): "not run"}


def test_judged_report_renders_golden_verdicts(obs_factory, report_factory, dom):
    """A live oracle without a golden fails its golden checks, and the page says which golden is missing."""
    obs = {"reference": obs_factory("reference", "no-such-case"), "vllm": obs_factory("vllm", "no-such-case")}
    verdicts = judge([{"id": "no-such-case", "memory": {"kv_cache_bytes": 1}}],
                     {("no-such-case", e): o for e, o in obs.items()}, {"reference": "under-test", "vllm": "oracle"})
    golden = [v for v in verdicts if v.check.endswith(".golden") and v.engine == "vllm"]
    assert {v.check for v in golden} == {"budget.golden", "memory.golden", "trace.golden"}
    assert all(v.failed and v.cause == "missing-golden" for v in golden)
    # the engine under test has no golden either: skipped (it is judged against the oracles), never failed
    assert all(v.outcome == "skip" for v in verdicts if v.check.endswith(".golden") and v.engine == "reference")
    report = report_factory(list(obs.values()), verdicts)
    page = dom(render.render_html(report))
    rows = page.find_all("tr", cls="verdict", data_check="budget.golden", data_engine="vllm")
    assert rows and "no vllm golden" in rows[0].text()
    (cell,) = page.find_all("td", cls="cell", data_engine="vllm")
    assert cell.attrs["data-outcome"] == "fail"


def test_autoescape_is_on():
    env = render._environment()
    assert env.from_string("{{ x }}").render(x="<i>") == "&lt;i&gt;"
