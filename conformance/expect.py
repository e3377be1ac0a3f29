"""Turn a `Verdict` into a pytest outcome: the suites' only way of judging (the job uses the same
verdicts, so a suite and `conformance run` can never disagree)."""

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


def golden_of(suite: str, engine: str, case_id: str) -> dict:
    """Another engine's recorded golden; a missing or unreadable one fails the test with its reason."""
    from conformance.goldens import GoldenFormatError, find_golden

    try:
        return find_golden(suite, engine, case_id)
    except GoldenFormatError as exc:
        pytest.fail(str(exc), pytrace=False)
