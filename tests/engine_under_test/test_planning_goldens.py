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
from conformance.cases import load_all
from conformance.golden_doc import golden_view

SUITES = ("budget", "memory", "trace")
COMPARED = ("status", "message")


def _golden(suite: str, case_id: str) -> dict | None:
    path = paths.goldens_dir() / suite / f"test_{suite}" / f"test_{suite}_golden[reference-{case_id}].json"
    return json.loads(path.read_text()) if path.is_file() else None


@pytest.fixture(scope="module")
def observations() -> dict[str, dict]:
    from conformance.adapters.reference.plan import plan

    return {c.id: plan(c.to_json()) for c in load_all()}


def test_every_case_has_reference_goldens(observations):
    missing = [(s, cid) for cid in observations for s in SUITES if _golden(s, cid) is None]
    assert not missing, f"cases without a reference golden: {missing}"


@pytest.mark.parametrize("suite", SUITES)
def test_reference_plan_equals_its_goldens(observations, suite):
    moved = []
    for cid, obs in observations.items():
        golden = _golden(suite, cid)
        view = golden_view(obs, (suite,))
        for field in COMPARED + (suite,):
            if view.get(field) != golden.get(field):
                moved.append(f"{cid}: {suite}.{field}: golden {str(golden.get(field))[:200]!r} "
                             f"!= planned {str(view.get(field))[:200]!r}")
    assert not moved, "\n".join(moved)
