"""Determinism: the same case and seed give byte-identical plan observations across three runs,
each in its own adapter process, once the fields of `VOLATILE_FIELDS` (and only those) are removed."""

from __future__ import annotations

import json

import pytest

from conformance.checks.diff import json_diff
from conformance.documents.observation import VOLATILE_FIELDS, strip_volatile

from .conftest import NUM_RUNS, PLANNED_CASES

ENGINES = [pytest.param("reference"), pytest.param("vllm", marks=pytest.mark.oracle),
           pytest.param("sglang", marks=pytest.mark.oracle)]


def canonical_bytes(obs: dict) -> bytes:
    return json.dumps(strip_volatile(obs), sort_keys=True, ensure_ascii=False).encode()


def _is_volatile(path: str) -> bool:
    return any(path == v or path.startswith(v + ".") or path.startswith(v + "[") for v in VOLATILE_FIELDS)


@pytest.mark.parametrize("engine", ENGINES)
def test_plan_observations_are_byte_identical_across_processes(engine, planned_three_times):
    runs = planned_three_times(engine)
    assert len(runs) == NUM_RUNS
    first = runs[0]
    assert [o["case_id"] for o in first] == list(PLANNED_CASES)
    assert all(o["status"] != "error" for o in first), [o["message"] for o in first if o["status"] == "error"]
    ok = [o for o in first if o["status"] == "ok"]
    assert ok and all(o["budget"] and o["memory"] for o in ok), "an ok plan must carry what is compared"
    for i, run in enumerate(runs[1:], start=2):
        for a, b in zip(first, run):
            moved = [d for d in json_diff(a, b) if not _is_volatile(d.path)]
            assert not moved, f"{engine} {a['case_id']}: run 1 and run {i} differ outside VOLATILE_FIELDS:\n" + "\n".join(
                f"  {d}" for d in moved[:20])
            assert canonical_bytes(a) == canonical_bytes(b)
    print(f"\n{engine}: {len(first)} cases x {NUM_RUNS} processes byte-identical "
          f"({sum(len(canonical_bytes(o)) for o in first)} bytes per run) excluding {VOLATILE_FIELDS}")


def test_volatile_fields_are_what_differs_and_nothing_more(planned_three_times):
    """The exclusion list is not a blanket: stripping it leaves every non-volatile top-level field."""
    obs = planned_three_times("reference")[0][0]
    stripped = strip_volatile(obs)
    assert set(obs) - set(stripped) <= {v.split(".")[0] for v in VOLATILE_FIELDS}
    assert "timing" in obs, "the probe records timing; determinism must be shown with it excluded"
