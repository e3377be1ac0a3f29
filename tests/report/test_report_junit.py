"""JUnit XML for CI: one testsuite per engine, failures and errors where the report has them."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace

from conformance.checks.verdicts import Verdict
from conformance.report.junit import write_junit


def test_junit_counts_follow_the_report(three_engine_report, tmp_path):
    verdicts = (Verdict("memory.inside_bound", "sglang", "case-a", "fail", "draft KV outside\x1b[0m", ("draft_kv",)),
                Verdict("budget.parity_with_vllm", "reference", "case-a", "pass", "equal"),
                Verdict("memory.seats_not_below_vllm", "reference", "case-b", "skip", "refused"))
    report = replace(three_engine_report, verdicts=verdicts)
    root = ET.parse(write_junit(report, tmp_path / "junit.xml")).getroot()
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert list(suites) == ["conformance.reference", "conformance.vllm", "conformance.sglang"]
    sgl = suites["conformance.sglang"]
    assert (sgl.get("tests"), sgl.get("failures"), sgl.get("errors")) == ("3", "1", "1")
    (failure,) = sgl.iter("failure")
    assert failure.get("message") == "draft KV outside[0m"      # control characters dropped, text kept
    (error,) = sgl.iter("error")
    assert "<b>burned</b>" in error.text
    ref = suites["conformance.reference"]
    assert (ref.get("tests"), ref.get("failures"), ref.get("skipped")) == ("4", "0", "1")
    assert root.get("tests") == str(sum(int(s.get("tests")) for s in suites.values()))
