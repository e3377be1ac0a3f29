"""One builder of the `--speculative-config` JSON (conformance.engines.speculative_config): vLLM's server, its
plan adapter and the reference engine's (or a port's) server are given the same configuration of a
case, apart from the method's name where vLLM names it otherwise."""

from __future__ import annotations

import json

from conformance.adapters.vllm.config import engine_args_kwargs
from conformance.documents.cases import find_case
from conformance.engines.manifest import case_values, load_manifest


def _served(case: dict) -> tuple[dict, dict]:
    """(vLLM's --speculative-config, the `{speculative_config}` placeholder) for `case`, as the manifests get them."""
    values = case_values(case, 1, {"vllm": "/opt/vllm/bin/vllm"}, load_manifest("vllm").mapping_module)
    return json.loads(values["vllm_speculative_config"]), json.loads(values["speculative_config"])


def test_a_dflash_case_gives_every_server_the_same_json_byte_for_byte():
    case = find_case("tiny-dflash-c4-k8").to_json()
    case["acceptance"] = {"mode": "synthetic", "mean_acceptance_length": 4}   # an integer, as a case may write it
    values = case_values(case, 1, {"vllm": "/opt/vllm/bin/vllm"}, load_manifest("vllm").mapping_module)
    assert values["vllm_speculative_config"] == values["speculative_config"]
    assert json.loads(values["speculative_config"])["synthetic_acceptance_length"] == 4.0


def test_served_fixed_acceptance_is_vllms_synthetic_length_and_plan_mode_keeps_it_fixed():
    case = find_case("tiny-dflash-c4-k8").to_json()   # acceptance fixed 3
    vllm, reference = _served(case)
    assert vllm == reference and vllm["synthetic_acceptance_length"] == 4.0
    assert "rejection_sample_method" not in engine_args_kwargs(case)["speculative_config"]


def test_parallel_variants_keep_the_cases_name_for_the_reference_and_vllms_for_vllm():
    case = find_case("drafting-table-p-eagle").to_json()
    vllm, reference = _served(case)
    assert (vllm["method"], vllm.get("parallel_drafting")) == ("eagle3", True)
    assert reference["method"] == "p-eagle" and "parallel_drafting" not in reference
    assert {k: v for k, v in vllm.items() if k not in ("method", "parallel_drafting")} == \
           {k: v for k, v in reference.items() if k != "method"}
    assert engine_args_kwargs(case)["speculative_config"]["method"] == "eagle3"
