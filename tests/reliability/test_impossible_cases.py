"""Valid but impossible cases (suites/cases/impossible-*.yaml) are refused with a reason.

The reference engine must refuse each one, naming the offending value and the limit read from
the model's own config.json (computed here independently). Each oracle's answer is data: refused
with its message or ok, never an error.
"""

from __future__ import annotations

import json

import pytest

from conformance.documents.cases import find_case

from .conftest import PLANNED_CASES


def _limits() -> dict[str, tuple[str, str]]:
    """case id -> (offending value, limit), both from the case and its shapes' config.json."""
    k_case = find_case("impossible-k-past-drafter-block")
    block_size = json.loads((k_case.draft_dir / "config.json").read_text())["block_size"]
    len_case = find_case("impossible-max-model-len-past-positions")
    positions = json.loads((len_case.target_dir / "config.json").read_text())["max_position_embeddings"]
    assert k_case.spec["speculative"]["num_speculative_tokens"] > block_size - 1
    assert len_case.spec["scheduler"]["max_model_len"] > positions
    return {k_case.id: (str(k_case.spec["speculative"]["num_speculative_tokens"]), str(block_size - 1)),
            len_case.id: (str(len_case.spec["scheduler"]["max_model_len"]), str(positions))}


def _impossible(observations: list[dict]) -> list[dict]:
    return [o for o in observations if o["case_id"].startswith("impossible-")]


def test_reference_refuses_each_impossible_case_with_its_reason(planned_three_times):
    limits = _limits()
    got = _impossible(planned_three_times("reference")[0])
    assert len(got) == len([c for c in PLANNED_CASES if c.startswith("impossible-")])
    for obs in got:
        value, limit = limits[obs["case_id"]]
        assert obs["status"] == "refused", f"{obs['case_id']}: the reference said {obs['status']}: {obs['message']}"
        assert value in obs["message"] and limit in obs["message"], (
            f"{obs['case_id']}: the refusal must name {value} and the limit {limit}: {obs['message']}")
        print(f"\nreference refuses {obs['case_id']}: {obs['message']}")


@pytest.mark.oracle
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_oracle_answer_is_data(engine, planned_three_times):
    for obs in _impossible(planned_three_times(engine)[0]):
        assert obs["status"] in ("ok", "refused"), f"{engine} {obs['case_id']}: {obs['message']}"
        if obs["status"] == "refused":
            assert obs["message"], "a refusal carries the oracle's own words"
        print(f"\n{engine} {obs['case_id']}: {obs['status']}: {(obs['message'] or '')[:240]}")
