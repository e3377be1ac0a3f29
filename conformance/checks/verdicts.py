"""Verdicts: what a check says of one engine's observation of one case.

Contract: a `Verdict` is (check, engine, case, outcome, message, details, cause), outcome one of
`pass` | `fail` | `skip` | `inconclusive` | `finding`. The checks that make them are in
`conformance.checks` (one module per suite); which check judges which engine, in
`conformance.checks.check_table`. Nothing here reads a file or knows an engine by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Defined where they are named; the report's figures read them from here (`conformance.report.render`).
from conformance.checks.memory_facts import NOT_UNDER_KV_BOUND  # noqa: F401
from conformance.documents.observation import BUDGET_FIELDS  # noqa: F401

# Which top-level sections each suite records in its goldens.
SUITE_SECTIONS: dict[str, tuple[str, ...]] = {"budget": ("budget",), "memory": ("memory",), "trace": ("trace",)}

PASS, FAIL, SKIP = "pass", "fail", "skip"
# Live outcomes: a timing comparison whose interval straddles its band's limit says neither pass nor fail;
# an oracle measured breaking its own definition (vLLM over its own bound) is a finding about the
# oracle, shown as such, not a failure of the run.
INCONCLUSIVE, FINDING = "inconclusive", "finding"
MISSING_GOLDEN = "missing-golden"


@dataclass(frozen=True)
class Verdict:
    check: str                      # "<suite>.<check>", e.g. "budget.parity_with_vllm"
    engine: str
    case_id: str
    outcome: str                    # pass | fail | skip | inconclusive | finding
    message: str = ""
    details: tuple[str, ...] = field(default=())
    cause: str = ""                 # why it failed, where a caller may group: "missing-golden"

    @property
    def failed(self) -> bool:
        return self.outcome == FAIL

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "engine": self.engine, "case_id": self.case_id, "outcome": self.outcome,
                "message": self.message, "details": list(self.details), "cause": self.cause}

