"""The reference engine's plan of every shipped case, in this process, equals its committed goldens.

Contract: for each case under suites/cases and each suite (budget, memory, trace), the
reference's observation (conformance.adapters.reference.plan.plan) viewed as the suite records it
(`golden_view`) equals `goldens/<suite>/test_<suite>/test_<suite>_golden[reference-<case>].json`
on status, message and the suite's section (provenance is the suites' business, not the planner's).

This is what `pytest suites --engines reference` checks through the golden tests, without the
session machinery: a few seconds in one process, so it is the mutation runner's view of the
suites (benchmarks/mutation_score.py). The reference goldens were recorded from the same planner
and are themselves judged against vLLM's goldens by the suites' parity checks.
"""

from __future__ import annotations

import json

import pytest

from conformance import paths
from conformance.documents.cases import load_all
from conformance.documents.golden_doc import golden_view

SUITES = ("budget", "memory", "trace")
COMPARED = ("status", "message")


def _golden(suite: str, case_id: str) -> dict | None:
    path = paths.goldens_dir() / suite / f"test_{suite}" / f"test_{suite}_golden[reference-{case_id}].json"
    return json.loads(path.read_text()) if path.is_file() else None


CASES = {c.id: c for c in load_all()}


def _plan(case_id: str) -> dict:
    from conformance.adapters.reference.plan import plan

    return plan(CASES[case_id].to_json())


def test_every_case_has_reference_goldens():
    missing = [(s, cid) for cid in CASES for s in SUITES if _golden(s, cid) is None]
    assert not missing, f"cases without a reference golden: {missing}"


# NOTE: one test per case, planning in the test itself (no shared fixture), so that a mutation
# tool's per-test coverage sees which test reaches which planning function.
@pytest.mark.parametrize("case_id", sorted(CASES))
def test_reference_plan_equals_its_goldens(case_id):
    obs = _plan(case_id)
    moved = []
    for suite in SUITES:
        golden = _golden(suite, case_id)
        view = golden_view(obs, (suite,))
        for field in COMPARED + (suite,):
            if view.get(field) != golden.get(field):
                moved.append(f"{case_id}: {suite}.{field}: golden {str(golden.get(field))[:200]!r} "
                             f"!= planned {str(view.get(field))[:200]!r}")
    assert not moved, "\n".join(moved)
