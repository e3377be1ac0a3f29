"""Turn a `Verdict` into a pytest outcome: the suites' only way of judging (the job judges with the
same check table, `conformance.check_table`, so a suite and `conformance run` cannot disagree)."""

from __future__ import annotations

import pytest

from conformance.verdicts import FAIL, SKIP, Verdict


def expect(verdict: Verdict) -> None:
    if verdict.outcome == SKIP:
        pytest.skip(verdict.message)
    if verdict.outcome == FAIL:
        lines = [f"{verdict.check} [{verdict.engine} on {verdict.case_id}]: {verdict.message}"]
        lines += [f"  {d}" for d in verdict.details]
        pytest.fail("\n".join(lines), pytrace=False)
