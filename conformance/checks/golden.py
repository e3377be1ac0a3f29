"""`<suite>.golden`: an observation against its own recorded golden (every suite that records one).

Contract: `golden_verdict` compares the suite's view of an observation with the engine's golden;
`golden_row(suite)` is the suite's row of the check table. The golden is looked up by the caller
(`check_table.evaluate_golden`, or syrupy's extension in pytest: `conformance.checks.goldens`), so the row's
`run` is never called.
"""

from __future__ import annotations

from typing import Any

from conformance.checks.common import engine_label, verdict
from conformance.checks.diff import json_diff
from conformance.checks.row import BOTH, CheckInput, CheckSpec
from conformance.checks.verdicts import FAIL, MISSING_GOLDEN, PASS, SKIP, SUITE_SECTIONS, Verdict
from conformance.documents.golden_doc import golden_view

FAILS_WHEN = ("an oracle moved from its golden (an oracle without one fails); an engine under test with a golden "
              "regressed (without one: skipped, it is judged against the oracles)")


def golden_verdict(suite: str, obs: dict[str, Any], golden: dict[str, Any] | None, source: str,
                   is_oracle: bool, missing_reason: str = "") -> Verdict:
    """`<suite>.golden`: the suite's view of `obs` equals its recorded golden. Another engine
    version, device profile or schema fails with a message saying so. With no golden, an oracle
    fails (did upstream move? nobody can tell); an engine under test is skipped: it is judged
    against the oracles, and its own golden is regression protection only."""
    check = f"{suite}.golden"
    if golden is None:
        if is_oracle:
            return verdict(check, obs, FAIL, missing_reason or f"no golden of the oracle {obs['engine']['name']} for "
                           f"{obs['case_id']}", cause=MISSING_GOLDEN)
        return verdict(check, obs, SKIP, f"no regression golden of {obs['engine']['name']} for {obs['case_id']} "
                       f"(optional: an engine under test is judged against the oracles' numbers, not its own)")
    view = golden_view(obs, SUITE_SECTIONS[suite])
    ge, ve = golden.get("engine") or {}, view["engine"]
    if ge.get("version") != ve.get("version"):
        return verdict(check, obs, FAIL, f"{source}: golden recorded with {engine_label(golden)}, but the live engine "
                       f"is {engine_label(view)}: re-record it for this version (--snapshot-update) or restore the pin")
    if golden.get("device_profile") != view.get("device_profile"):
        return verdict(check, obs, FAIL, f"{source}: golden recorded on device profile "
                       f"{golden.get('device_profile')!r}, live is {view.get('device_profile')!r}")
    if golden.get("schema_version") != view.get("schema_version"):
        return verdict(check, obs, FAIL, f"{source}: golden has observation schema {golden.get('schema_version')!r}, "
                       f"live has {view.get('schema_version')!r}: re-record with --snapshot-update")
    diffs = json_diff(golden, view)
    if diffs:
        advice = ("if upstream moved on purpose, re-record with --snapshot-update" if is_oracle else
                  "a regression of the engine under test, unless the change is intended (then re-record)")
        return verdict(check, obs, FAIL, f"{engine_label(view)} on {obs['case_id']} differs from its golden {source} "
                       f"({len(diffs)} field(s)); {advice}", diffs)
    return verdict(check, obs, PASS, f"equals its golden {source}")


def _looked_up_by_the_caller(_: CheckInput) -> Verdict:
    raise AssertionError("golden checks are evaluated by check_table.evaluate_golden (they need the engine's golden)")


def golden_row(suite: str) -> CheckSpec:
    """The row of `<suite>.golden` (a suite of SUITE_SECTIONS): every engine, every case."""
    return CheckSpec(f"{suite}.golden", suite, BOTH, _looked_up_by_the_caller, FAILS_WHEN, golden=True,
                     reads=("status", "message", "provenance") + SUITE_SECTIONS[suite])
