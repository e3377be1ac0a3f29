"""What the report tells a port team at a glance: the failing check family per overview cell (which
seed bug), an oracle's own findings marked as findings (a neutral mark outside its bound, no failure
of the run), drafting slots in the step chart, a distinct colour for every engine of any run, whole
names, and the expectations read apart (HTML, JUnit, console)."""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from dataclasses import replace

from rich.console import Console

from conformance.checks.expectations import Expectation
from conformance.checks.verdicts import Verdict
from conformance.report import charts, render
from conformance.report.families import FAMILIES, cell_families, family_of
from conformance.report.junit import junit_tree
from conformance.report.model import EngineEntry, cell_outcome, failed_run, outcome_counts
from conformance.report.palette import palette, palette_colours
from conformance.run.exit_status import run_exit_status
from conformance.run.summary import print_summary


def _with_roles(report, roles: dict[str, str]):
    return replace(report, engines=tuple(replace(e, role=roles.get(e.name, "under-test")) for e in report.engines))


def _fail(check: str, engine: str, case_id: str = "case-a", msg: str = "differs") -> Verdict:
    return Verdict(check, engine, case_id, "fail", msg)


def test_every_check_of_the_table_has_a_family_and_the_seed_bugs_have_theirs():
    from conformance.checks.check_table import CHECKS, LIVE_CHECKS

    names = {f.name for f in FAMILIES}
    assert {family_of(c.name) for c in (*CHECKS, *LIVE_CHECKS)} <= names
    assert family_of("memory.inside_bound") == "bound" and family_of("memory.unified_pool_seats") == "pools"
    assert family_of("trace.steps_within_budget") == "reservation" and family_of("trace.equals_vllm") == "trace"
    assert family_of("memory.some_new_check") == "memory"          # an unlisted check keeps its suite
    # the live rows read as the property they measure
    assert family_of("live.device_memory_within_bound") == "bound" and family_of("live.concurrency_served") == "pools"
    assert {family_of(c) for c in ("live.acceptance_equals_vllm", "live.throughput_parity_vllm",
                                    "live.plan_matches_run")} == {"live"} and family_of("live.golden") == "golden"
    # most telling first: a bound failure and the seat comparison it causes read "bound", then "pools"
    assert cell_families([_fail("memory.seats_equal_vllm", "p"), _fail("memory.inside_bound", "p"),
                          Verdict("trace.equals_vllm", "p", "case-a", "pass")]) == ["bound", "pools"]
    # refused where vLLM plans: the budget and trace comparisons say only that; the pool checks keep theirs
    refused = [_fail("budget.parity_with_vllm", "p"), _fail("memory.unified_pool_seats", "p"), _fail("trace.equals_vllm", "p")]
    assert cell_families(refused) == ["pools", "reservation", "trace"]
    assert cell_families(refused, "refused") == ["pools", "refused"]


def test_overview_cell_names_the_failing_families(three_engine_report, dom):
    report = replace(three_engine_report, verdicts=(
        _fail("memory.inside_bound", "reference"), _fail("memory.seats_equal_vllm", "reference"),
        _fail("trace.steps_within_budget", "vllm"), _fail("trace.equals_vllm", "vllm")))
    page = dom(render.render_html(report))
    (ref,) = page.find_all("td", cls="cell", data_case="case-a", data_engine="reference")
    assert ref.attrs["data-families"] == "bound pools"
    assert [s.text() for s in ref.find_all("span", cls="family")] == ["bound", "pools"]
    assert ref.find_all("span", cls="family", data_family="bound")[0].attrs["title"] == "memory.inside_bound"
    (vllm,) = page.find_all("td", cls="cell", data_case="case-a", data_engine="vllm")
    assert vllm.attrs["data-families"] == "reservation trace"
    (legend,) = page.find_all(id="family-legend")
    assert "seed bug 1" in legend.text() and "seed bug 3" in legend.text()


def test_an_oracles_failed_check_is_a_finding_not_a_failure(three_engine_report, dom):
    """sglang (an oracle) keeps draft KV outside its bound: grey and dashed, its cell a finding, the
    run passes; the same store outside an engine under test's bound is red and fails the run."""
    finding = _fail("memory.draft_kv_scaling", "sglang", msg="draft_kv outside the bound")
    report = _with_roles(replace(three_engine_report, verdicts=(finding,)), {"vllm": "oracle", "sglang": "oracle"})
    assert cell_outcome(report, "case-a", "sglang") == "finding"
    assert outcome_counts(report)["finding"] == 1 and outcome_counts(report)["fail"] == 0
    page = dom(render.render_html(report))
    (cell,) = page.find_all("td", cls="cell", data_case="case-a", data_engine="sglang")
    assert cell.attrs["data-outcome"] == "finding" and cell.attrs["data-families"] == "bound"
    (outside,) = page.find_all("rect", cls="outside-bound")
    assert "finding" in outside.classes and outside.attrs["fill"] == charts.FINDING_COLOUR != charts.WARNING_COLOUR
    assert "a finding about the oracle" in outside.text()
    (row,) = page.find_all("tr", cls="verdict", data_check="memory.draft_kv_scaling")
    assert row.attrs["data-reading"] == "finding" and "outcome-finding" in row.classes
    assert page.find_all(id="num-failed-checks")[0].text() == "0" and page.find_all(id="num-findings")[0].text() == "1"
    (tc,) = [t for t in junit_tree(report).getroot().iter("testcase") if t.get("name") == "memory.draft_kv_scaling[case-a]"]
    assert tc.find("failure") is None and "finding about the oracle" in tc.find("skipped").get("message")
    # the run without the error case: the finding alone does not fail it
    ok = replace(report, cases=report.cases[:1])
    assert not failed_run(ok) and run_exit_status(ok) == 0

    under_test = _with_roles(replace(three_engine_report, cases=three_engine_report.cases[:1], verdicts=(
        replace(finding, engine="sglang"),)), {"vllm": "oracle"})          # sglang judged as an engine under test
    assert cell_outcome(under_test, "case-a", "sglang") == "fail" and run_exit_status(under_test) == 1
    page = dom(render.render_html(under_test))
    (outside,) = page.find_all("rect", cls="outside-bound")
    assert "finding" not in outside.classes and outside.attrs["fill"] == charts.WARNING_COLOUR
    # an oracle that moved from its golden is a failure, not a finding
    moved = _with_roles(replace(ok, verdicts=(_fail("memory.golden", "sglang"),)), {"vllm": "oracle", "sglang": "oracle"})
    assert cell_outcome(moved, "case-a", "sglang") == "fail" and run_exit_status(moved) == 1


def test_a_live_checks_own_finding_makes_the_oracles_cell_a_finding(three_engine_report, dom):
    """A live check that says "finding" itself (vLLM over its own NVML bound) reads as an oracle's failed
    check does: the cell is a finding, so the summary's finding count and its "findings about oracles"
    agree (the H200 report showed "finding: 0" beside "findings about oracles: 3")."""
    over = Verdict("live.device_memory_within_bound", "vllm", "case-a", "finding", "over its own bound by 1.12 GiB")
    report = _with_roles(replace(three_engine_report, cases=three_engine_report.cases[:1], verdicts=(over,)),
                         {"vllm": "oracle", "sglang": "oracle"})
    assert cell_outcome(report, "case-a", "vllm") == "finding"
    assert outcome_counts(report)["finding"] == 1 and outcome_counts(report)["fail"] == 0
    page = dom(render.render_html(report))
    assert page.find_all(id="num-findings")[0].text() == "1"
    assert not failed_run(report) and run_exit_status(report) == 0


def test_step_chart_charges_each_engines_steps_with_vllms_drafting_slots(obs_factory, report_factory, dom):
    vllm = obs_factory("vllm", "case-a", steps=[200, 180, 40])
    vllm["budget"]["drafting_slots_per_request"] = 8
    port = obs_factory("port-no-reservation", "case-a", steps=[256, 256, 40])   # reserves none itself
    report = _with_roles(report_factory([vllm, port]), {"vllm": "oracle"})
    page = dom(render.render_html(report))
    (section,) = page.find_all("section", cls="case", data_case="case-a")
    extra = section.find_all("polyline", cls="trace-series-extra")
    assert [p.attrs["data-engine"] for p in extra] == ["vllm", "port-no-reservation"]
    tokens = {p.attrs["data-engine"]: p.attrs["points"] for p in section.find_all("polyline", cls="trace-series")}
    for p in extra:   # each step 4 requests x 8 slots above the engine's tokens
        ys_tokens = [float(xy.split(",")[1]) for xy in tokens[p.attrs["data-engine"]].split()]
        ys_charged = [float(xy.split(",")[1]) for xy in p.attrs["points"].split()]
        assert all(c < t for c, t in zip(ys_charged, ys_tokens))   # higher on the chart: smaller y
    text = section.text()
    assert "port-no-reservation + vLLM's drafting slots (8/request)" in text
    assert "vllm: 8 drafting slots per request · port-no-reservation: 0 drafting slots per request" in text
    assert section.find_all("line", cls="budget-line")


def test_no_slot_line_where_the_slots_are_zero(three_engine_report, dom):
    page = dom(render.render_html(three_engine_report))
    assert not page.find_all("polyline", cls="trace-series-extra")


def test_palette_gives_every_engine_its_own_colour_for_any_number():
    for n in range(1, 80):
        colours = palette_colours(n)
        assert len(set(colours)) == n and all(re.fullmatch("#[0-9a-f]{6}", c) for c in colours)
    names = [f"engine-{i}" for i in range(25)]
    assert palette(names) == palette(list(names))           # deterministic
    assert len(set(palette(names).values())) == 25
    # the port and vLLM, the clash, differ
    two = palette(["port-seed-bugs", "vllm"])
    assert two["port-seed-bugs"] != two["vllm"]


def test_a_report_of_many_engines_draws_each_in_its_own_colour_with_its_whole_name(obs_factory, report_factory, dom):
    names = [f"port-{i}-" + "x" * 40 for i in range(12)] + ["vllm"]
    report = report_factory([obs_factory(n, "case-a", steps=[100 + i, 50]) for i, n in enumerate(names)])
    page = dom(render.render_html(report))
    series = page.find_all("polyline", cls="trace-series")
    strokes = [s.attrs["stroke"] for s in series]
    assert len(series) == 13 and len(set(strokes)) == 13
    swatches = [li.find_all("span", cls="swatch")[0].attrs["style"] for li in page.find_all("li", cls="engine-state")]
    assert [re.search("#[0-9a-f]{6}", s).group(0) for s in swatches] == strokes     # legend == charts
    labels = [t.text() for t in page.find_all("text", cls="bar-label")]
    assert labels == names
    (svg,) = page.find_all("svg", cls="ledger-chart")
    first_bar_x = min(float(r.attrs["x"]) for r in svg.find_all("rect", cls="segment"))
    assert first_bar_x >= 7 * max(map(len, names))          # room for the longest label left of the bars
    assert "…" not in page.text()


def test_console_summary_keeps_whole_names_and_lists_expectations_apart(three_engine_report):
    long_name = "a-port-with-a-rather-long-name-that-a-narrow-terminal-would-cut"
    report = replace(three_engine_report,
                     engines=(*three_engine_report.engines, EngineEntry(long_name, "1.0", "planned", role="under-test")),
                     verdicts=(_fail("memory.inside_bound", "reference"), _fail("trace.equals_vllm", "reference"),
                               Verdict("memory.seats_equal_vllm", "reference", "case-a", "pass", "")),
                     expectations=(Expectation("memory.inside_bound", "*", "reference", "draft KV beside the pool",
                                               "PORT-1", "exp.yaml: expectations[0]"),
                                   Expectation("memory.seats_equal_vllm", "case-*", None, "two pools", "PORT-2",
                                               "exp.yaml: expectations[1]")))
    buf = io.StringIO()
    print_summary(Console(file=buf, width=70, color_system=None), report)
    out = buf.getvalue()
    assert "…" not in out
    lines = out.splitlines()
    header = lines[next(i for i, line in enumerate(lines) if line.startswith("┏")) + 1:
                   next(i for i, line in enumerate(lines) if line.startswith("┡"))]
    assert "".join(line.split("┃")[-2].strip() for line in header).replace(" ", "") == f"{long_name}1.0"  # folded, whole
    assert "new failures: 1" in out and "FAIL reference case-a trace.equals_vllm" in out
    assert "unexpected passes: 1" in out and "XPASS reference case-a memory.seats_equal_vllm" in out.replace("\n", " ")
    assert "expected failures: 1" in out and "XFAIL reference case-a memory.inside_bound" in out
    assert "fail (bound, trace)" in out.replace("\n", " ") or "(bound," in out
    tree = junit_tree(report).getroot()
    by_name = {t.get("name"): t for t in tree.iter("testcase") if t.get("classname", "").startswith("conformance.reference.")}
    assert "expected failure: draft KV" in by_name["memory.inside_bound[case-a]"].find("skipped").get("message")
    assert by_name["memory.seats_equal_vllm[case-a]"].find("failure").get("type") == "unexpected-pass"
    assert by_name["trace.equals_vllm[case-a]"].find("failure").get("type") == "parity"
    assert isinstance(tree, ET.Element)
