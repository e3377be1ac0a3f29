"""`conformance run`'s exit status, by outcome: what a team's CI gates on (stable; README "Exit status").

    0  every check passed, or failed only where an expectations file says it is known to (an
       oracle's own findings never fail a run)
    1  a check failed that no expectation names (a new failure), or an expected failure passed
       (an unexpected pass: remove the entry)
    2  bad input: a case, engine file, expectations file or option the framework cannot use
       (`ConformanceError`, before anything is planned)
    3  an engine errored: it crashed, hung, wrote something that is not an observation, or its
       environment could not be built (the engine, not the port's figures, needs attention);
       3 wins over 1, since the run's verdicts are incomplete
    130 / 143  interrupted by SIGINT / SIGTERM (the partial report is still written)
"""

from __future__ import annotations

from conformance.checks.expectations import classify
from conformance.report.model import RunReport, cell_outcome

PASSED, CHECK_FAILED, BAD_INPUT, ENGINE_ERROR = 0, 1, 2, 3


def engine_errored(report: RunReport) -> bool:
    """An observation of status error, or an engine whose environment could not be built."""
    return any(e.state == "failed" for e in report.engines) or any(
        cell_outcome(report, c.id, e.name) == "error" for c in report.cases for e in report.matrix_engines)


def run_exit_status(report: RunReport) -> int:
    if engine_errored(report):
        return ENGINE_ERROR
    return CHECK_FAILED if classify(report.verdicts, report.expectations, report.oracles).gate_fails else PASSED
