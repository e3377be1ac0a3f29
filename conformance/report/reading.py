"""How a report reads each verdict and overview cell: against the run's expectations (expected
failure, unexpected pass, new failure) and the engines' roles (an oracle's finding), with the check
families a failing cell shows (`report.families`).

Contract: pure functions of a `RunReport`; `render` passes their dicts to the template.
"""

from __future__ import annotations

from typing import Any

from conformance.checks.expectations import classify, find
from conformance.report.families import cell_families, family_of
from conformance.report.model import RunReport, cell_outcome, is_finding


def verdict_view(v, report: RunReport) -> dict[str, Any]:
    """A verdict row: its outcome, and how the run's expectations and roles read it
    (`expected` failure, `unexpected-pass`, an oracle's `finding`, or nothing)."""
    entry = find(report.expectations, v.check, v.engine, v.case_id)
    if is_finding(v, report.oracles):
        reading = "finding"
    elif entry is not None and v.outcome == "fail":
        reading = "expected"
    elif entry is not None and v.outcome == "pass":
        reading = "unexpected-pass"
    else:
        reading = ""
    return {"check": v.check, "engine": v.engine, "outcome": v.outcome, "message": v.message,
            "details": v.details, "reading": reading, "entry": entry, "family": family_of(v.check)}


def matrix_cell(report: RunReport, case_id: str, engine: str) -> dict[str, Any]:
    """An overview cell: its outcome and, for a failure (or an oracle's finding), the families of the
    checks that failed (`report.families`): which seed bug it shows; `expected` when every failure is
    a known one."""
    outcome = cell_outcome(report, case_id, engine)
    verdicts = report.verdicts_of(case_id, engine)
    failed = [v for v in verdicts if v.failed]
    status = (report.observation(case_id, engine) or {}).get("status")
    families = cell_families(failed, status) if outcome in ("fail", "finding") else []
    known = [v for v in failed if find(report.expectations, v.check, v.engine, v.case_id) is not None]
    unexpected = [v for v in verdicts if v.outcome == "pass" and find(report.expectations, v.check, v.engine, v.case_id)]
    return {"engine": engine, "outcome": outcome, "families": families,
            "family_checks": {f: sorted({v.check for v in failed if family_of(v.check) == f}) for f in families},
            "all_expected": bool(failed) and len(known) == len(failed), "unexpected_passes": len(unexpected)}


def expectations_view(report: RunReport) -> dict[str, Any] | None:
    """The run's expectations, read against its verdicts: new failures, unexpected passes, expected
    failures, unused entries; None when the run had none."""
    if not report.expectations:
        return None
    c = classify(report.verdicts, report.expectations, report.oracles)
    return {"new": list(c.new_failures), "unexpected": list(c.unexpected_passes),
            "expected": list(c.expected_failures), "unused": list(c.unused)}
