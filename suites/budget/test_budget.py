"""Budget suite: see README.md for the pass criteria."""

from __future__ import annotations

import pytest

from conformance.diff import format_differences, json_diff
from conformance.goldens import check_golden, find_golden, golden_view

BUDGET_FIELDS = ("max_num_batched_tokens", "max_num_scheduled_tokens", "drafting_slots_per_request",
                 "lookahead_tokens", "max_num_seqs", "max_active_seqs")


def test_budget_golden(engine, case, observation, golden):
    check_golden(golden, golden_view(observation, ["budget"]))


def _intended(case, engine: str, field: str) -> dict | None:
    for d in case.spec.get("intended_differences", []):
        if d["engine"] == engine and d["field"] in (field, f"budget.{field}"):
            return d
    return None


def _check_documented(observation, intended: dict) -> None:
    node = observation
    for part in intended["field"].split("."):
        node = node[part]
    assert node == intended["expected"], (
        f"the case documents {intended['field']} = {intended['expected']!r} for the reference "
        f"({intended['reason']}), but it is {node!r}")


@pytest.mark.engines("reference")
def test_budget_parity_with_vllm(engine, case, observation):
    oracle = find_golden("budget", "vllm", case.id)
    status_difference = _intended(case, "vllm", "status")
    if status_difference:
        _check_documented(observation, status_difference)
        assert oracle["status"] != observation["status"], (
            f"{case.path} documents a status difference from vLLM that no longer exists: both say {oracle['status']}")
        return
    assert observation["status"] == oracle["status"], (
        f"vLLM says {oracle['status']} ({oracle['message']}), the reference says {observation['status']} "
        f"({observation['message']})")
    if oracle["status"] != "ok":
        return
    diffs = [d for d in json_diff({f: oracle["budget"][f] for f in BUDGET_FIELDS},
                                  {f: observation["budget"][f] for f in BUDGET_FIELDS})
             if not _intended(case, "vllm", d.path)]
    for f in BUDGET_FIELDS:
        if _intended(case, "vllm", f):
            _check_documented(observation, _intended(case, "vllm", f))
    assert not diffs, format_differences(f"reference budget differs from vLLM 0.33.0 on {case.id}:", diffs)


@pytest.mark.engines("reference")
def test_active_seqs_not_below_sglang(engine, case, observation):
    oracle = find_golden("budget", "sglang", case.id)
    if oracle["status"] != "ok" or observation["status"] != "ok":
        pytest.skip(f"SGLang {oracle['status']}, reference {observation['status']}: nothing comparable")
    assert observation["budget"]["max_active_seqs"] >= oracle["budget"]["max_active_seqs"], (
        f"reference runs {observation['budget']['max_active_seqs']} sequences where SGLang runs "
        f"{oracle['budget']['max_active_seqs']} ({oracle['message']})")
