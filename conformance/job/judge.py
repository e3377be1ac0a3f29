"""Judge one case's observations on every engine with the suites' rules (`conformance.verdicts`).

Contract: `judge_case(case_spec, observations)` returns every applicable `Verdict`:
- each engine in `GOLDEN_ENGINES` against its own golden, per suite (a missing golden fails);
- each `verdicts.CHECKS` entry that applies to (engine, case). A check that compares with another
  engine uses that engine's golden of the check's suite (as the suites do); when no golden exists
  it uses the other engine's live observation from this run and says so; with neither, it fails.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from conformance.engines import ORACLES
from conformance.goldens import GoldenFormatError, find_golden
from conformance.verdicts import CHECKS, FAIL, MISSING_GOLDEN, SUITE_SECTIONS, Verdict, matches_golden

# Engines whose live observation is checked against its recorded golden in the job: the oracles
# (did upstream move?). The engine under test is compared with the oracles instead.
GOLDEN_ENGINES: tuple[str, ...] = ORACLES

GoldenLookup = Callable[[str, str, str], dict[str, Any]]   # (suite, engine, case_id) -> golden; raises


def _golden(lookup: GoldenLookup, suite: str, engine: str, case_id: str) -> tuple[dict[str, Any] | None, str]:
    try:
        return lookup(suite, engine, case_id), f"{engine} golden in goldens/{suite}"
    except GoldenFormatError as exc:
        return None, str(exc)


def judge_case(case_spec: Mapping[str, Any], observations: Mapping[str, dict[str, Any]],
               lookup: GoldenLookup = find_golden) -> list[Verdict]:
    case_id = case_spec["id"]
    spec = dict(case_spec)
    out: list[Verdict] = []
    for engine, obs in observations.items():
        if engine in GOLDEN_ENGINES:
            for suite in SUITE_SECTIONS:
                golden, source = _golden(lookup, suite, engine, case_id)
                out.append(matches_golden(suite, obs, golden, source, missing_reason=source))
        for check in CHECKS:
            if not check.applies(engine, case_id):
                continue
            other, source = None, ""
            if check.against:
                other, why = _golden(lookup, check.suite, check.against, case_id)
                source = why
                if other is None and check.against in observations:
                    other = observations[check.against]
                    source = f"live {check.against} {other['engine']['version']} of this run, no golden"
                if other is None:
                    out.append(Verdict(check.name, engine, case_id, FAIL,
                                       f"nothing to compare with: {why}; and {check.against} was not planned "
                                       f"in this run", cause=MISSING_GOLDEN))
                    continue
            out.append(check.run(obs, other, spec, source))
    return out
