"""Turn a `Verdict` into a pytest outcome: the suites' only way of judging (the job judges with the
same check table, `conformance.checks.check_table`, so a suite and `conformance run` cannot disagree)."""

from __future__ import annotations

import warnings

import pytest

from conformance.checks.verdicts import FAIL, FINDING, INCONCLUSIVE, SKIP, Verdict


class OracleFinding(UserWarning):
    """An oracle measured breaking its own definition (a live finding): shown, never a failure."""


def expect(verdict: Verdict) -> None:
    """skip -> skipped; inconclusive -> skipped, its reason starting "inconclusive:" (noise never fails);
    finding -> passed with an `OracleFinding` warning; fail -> failed with the message and details."""
    if verdict.outcome == SKIP:
        pytest.skip(verdict.message)
    if verdict.outcome == INCONCLUSIVE:
        pytest.skip(f"inconclusive: {verdict.check} [{verdict.engine} on {verdict.case_id}]: {verdict.message}")
    if verdict.outcome == FINDING:
        warnings.warn(OracleFinding(f"{verdict.check} [{verdict.engine} on {verdict.case_id}]: {verdict.message}"))
    if verdict.outcome == FAIL:
        lines = [f"{verdict.check} [{verdict.engine} on {verdict.case_id}]: {verdict.message}"]
        lines += [f"  {d}" for d in verdict.details]
        pytest.fail("\n".join(lines), pytrace=False)
