"""Pure helpers of the vLLM adapter: case -> native knobs (no vLLM import needed)."""

from __future__ import annotations

from conformance.adapters.vllm.config import case_mapping, engine_args_kwargs
from conformance.documents.cases import find_case
from conformance.engines.speculative_config import speculative_config


def test_parallel_variants_map_to_parallel_drafting():
    pard = find_case("drafting-table-pard").to_json()
    peagle = find_case("drafting-table-p-eagle").to_json()
    assert speculative_config(pard) == {"method": "draft_model", "num_speculative_tokens": 8,
                                        "parallel_drafting": True, "model": pard["resolved"]["draft_dir"]}
    assert speculative_config(peagle)["method"] == "eagle3" and speculative_config(peagle)["parallel_drafting"]


def test_mtp_and_ngram_have_no_draft_model():
    mtp = speculative_config(find_case("drafting-table-mtp").to_json())
    ngram = speculative_config(find_case("drafting-table-ngram").to_json())
    assert "model" not in mtp and "model" not in ngram
    assert ngram["prompt_lookup_max"] == 4 and ngram["prompt_lookup_min"] == 2


def test_every_case_field_is_mapped():
    case = find_case("tiny-dflash-c4-k8").to_json()
    kwargs = engine_args_kwargs(case)
    mapping = case_mapping(case, kwargs)
    assert kwargs["kv_cache_memory_bytes"] == case["memory"]["kv_cache_bytes"]
    assert kwargs["mamba_ssm_cache_dtype"] == case["cache"]["ssm_dtype"]
    for field in ("scheduler.max_num_seqs", "scheduler.max_model_len", "scheduler.max_num_batched_tokens",
                  "memory.kv_cache_bytes", "cache.prefix_caching", "cache.ssm_dtype", "draft"):
        assert field in mapping


def test_synthetic_acceptance_maps_to_vllms_synthetic_sampler():
    case = find_case("tiny-dflash-c4-k8").to_json()
    case["acceptance"] = {"mode": "synthetic", "mean_acceptance_length": 3.5}
    knobs = speculative_config(case)
    assert knobs["rejection_sample_method"] == "synthetic" and knobs["synthetic_acceptance_length"] == 3.5
