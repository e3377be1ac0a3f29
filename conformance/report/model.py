"""What a parity report shows: the run's engines and cases, every observation, every verdict.

Contract: a `RunReport` is complete data for `render.render_html`; `cell_outcome` is the one rule
that folds a (case, engine) into the overview matrix's outcome, used by the HTML, the terminal
summary and JUnit alike:

    no observation            -> "not run"   (interrupted, or the engine was never reached)
    status error              -> "error"
    any verdict failed        -> "fail"      (an oracle: only where one of its own goldens failed)
    an oracle's check failed  -> "finding"   (a finding about the oracle, shown as such: the oracle is
                                              the expectation, and does not fail the run; `is_finding`)
    status refused            -> "refused"   (a refusal is data; its checks passed)
    otherwise                 -> "pass"
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from conformance.checks.expectations import Expectation
from conformance.checks.verdicts import FINDING, Verdict
from conformance.engines.roles import ORACLE

OUTCOMES = ("pass", "fail", "finding", "refused", "error", "not run")


@dataclass(frozen=True)
class EngineEntry:
    name: str
    version: str | None
    state: str                      # planned | skipped | failed (its environment could not be built)
    note: str = ""
    role: str | None = None         # oracle | under-test (None: a run that did not record it)
    defects: tuple[str, ...] = ()   # the defects its engine file switches on (a stand-in port)


@dataclass(frozen=True)
class CaseEntry:
    id: str
    spec: Mapping[str, Any] = field(repr=False)

    @property
    def description(self) -> str:
        return " ".join(str(self.spec.get("description") or "").split())

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(self.spec.get("tags") or ())


@dataclass(frozen=True)
class RunReport:
    run_id: str
    title: str
    engines: tuple[EngineEntry, ...]
    cases: tuple[CaseEntry, ...]
    observations: Mapping[tuple[str, str], dict[str, Any]]   # (case_id, engine) -> observation
    verdicts: tuple[Verdict, ...]
    started_at: str | None = None
    finished_at: str | None = None
    interrupted: bool = False
    origin: str = "conformance run"
    selection: str = ""
    expectations: tuple[Expectation, ...] = ()                # the known failures the run was judged with
    goldens_dir: str | None = None                            # where engines under test keep their goldens
    runs: tuple[dict[str, Any], ...] = ()                     # where it ran: each run's host, device, shard,
                                                              # commit, goldens revision (several when merged)

    @property
    def matrix_engines(self) -> tuple[EngineEntry, ...]:
        """Engines with a column in the matrix: every engine the run meant to plan (not the skipped)."""
        return tuple(e for e in self.engines if e.state != "skipped")

    def observation(self, case_id: str, engine: str) -> dict[str, Any] | None:
        return self.observations.get((case_id, engine))

    def verdicts_of(self, case_id: str, engine: str | None = None) -> list[Verdict]:
        return [v for v in self.verdicts if v.case_id == case_id and (engine is None or v.engine == engine)]

    @property
    def oracles(self) -> frozenset[str]:
        return frozenset(e.name for e in self.engines if e.role == ORACLE)


def is_finding(verdict: Verdict, oracles: frozenset[str] | set[str]) -> bool:
    """A failed check of an oracle other than its own golden: a fact about the oracle (it keeps a store
    outside its bound, say), reported as a finding, never as a failure of the run. An oracle that moved
    from its golden is a failure (upstream moved: re-record, say why)."""
    if verdict.outcome == FINDING:   # a live check that says so itself (an oracle over its own bound)
        return True
    return verdict.failed and verdict.engine in oracles and not verdict.check.endswith(".golden")


def cell_outcome(report: RunReport, case_id: str, engine: str) -> str:
    obs = report.observation(case_id, engine)
    if obs is None:
        return "not run"
    if obs["status"] == "error":
        return "error"
    # a live check's own finding (an oracle over its own bound) makes the cell a finding as an oracle's
    # failed check does: the summary's finding count and its "findings about oracles" then agree
    failed = [v for v in report.verdicts_of(case_id, engine) if v.failed or v.outcome == FINDING]
    if any(not is_finding(v, report.oracles) for v in failed):
        return "fail"
    if failed:
        return "finding"
    return "refused" if obs["status"] == "refused" else "pass"


def outcome_counts(report: RunReport) -> dict[str, int]:
    counts = {o: 0 for o in OUTCOMES}
    for case in report.cases:
        for engine in report.matrix_engines:
            counts[cell_outcome(report, case.id, engine.name)] += 1
    return counts


def failed_run(report: RunReport) -> bool:
    """True when the run must exit non-zero: an engine error, a failed check no expectation names, or
    an expected failure that passed (nothing passes silently; `run.exit_status` says which code)."""
    from conformance.checks.expectations import classify

    counts = outcome_counts(report)
    return bool(counts["error"] or any(e.state == "failed" for e in report.engines)
                or classify(report.verdicts, report.expectations, report.oracles).gate_fails)
