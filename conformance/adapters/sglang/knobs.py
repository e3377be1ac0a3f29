"""Case -> SGLang 0.5.23 `ServerArgs` keyword arguments, with the mapping recorded.

Contract: `server_args_kwargs(case)` returns `(kwargs, mapping)` or raises `Unsupported` with a
message for a case SGLang 0.5.23 cannot express (its own words where it has them). Nothing here
resolves anything: SGLang's `resolve_once()` does that, and its resolved values are what the
observation reports.

Speculative methods (case name -> SGLang algorithm, draft-token knobs for k drafts):

    dflash       DFLASH      speculative_num_draft_tokens = k + 1 (the DFlash block: k drafts
                             after the anchor token; SGLang forces num_steps = topk = 1)
    dspark       DSPARK      speculative_dspark_block_size = k (SGLang's gamma), num_draft_tokens = k + 1
    eagle3       EAGLE3      num_steps = k, eagle_topk = 1, num_draft_tokens = k + 1
    mtp          NEXTN       (SGLang's alias of EAGLE over the target's own MTP layers) same knobs
    draft_model  STANDALONE  same knobs as EAGLE3, with the draft model dir
    ngram        NGRAM       speculative_num_draft_tokens = k + 1 (tree incl. the root token)
    p-eagle, pard            no SGLang 0.5.23 algorithm: `SpeculativeAlgorithm.from_string`
                             refuses them, and its message is the refusal
"""

from __future__ import annotations

from typing import Any

ALGORITHMS = {
    "dflash": "DFLASH",
    "dspark": "DSPARK",
    "eagle3": "EAGLE3",
    "mtp": "NEXTN",
    "draft_model": "STANDALONE",
    "ngram": "NGRAM",
}
KV_CACHE_DTYPES = {"bfloat16": "bfloat16", "fp8": "fp8_e4m3"}  # SGLang has no float16 KV choice
EAGLE_STYLE = frozenset({"EAGLE3", "NEXTN", "STANDALONE"})


class Unsupported(Exception):
    """The case asks for something SGLang 0.5.23 has no knob for (message: why)."""


def algorithm_for(method: str) -> str:
    """SGLang's algorithm name for a case method, or `Unsupported` with SGLang's own message."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    name = ALGORITHMS.get(method, method)
    try:
        SpeculativeAlgorithm.from_string(name)
    except ValueError as exc:
        raise Unsupported(f"{exc} (SGLang 0.5.23 has no speculative algorithm for case method {method!r})") from None
    return name


def server_args_kwargs(case: dict[str, Any], device: str) -> tuple[dict[str, Any], dict[str, Any]]:
    spec = case["speculative"]
    sched = case["scheduler"]
    cache = case["cache"]
    k = int(spec["num_speculative_tokens"])
    algo = algorithm_for(spec["method"])
    kwargs: dict[str, Any] = {
        "model_path": case["resolved"]["target_dir"],
        "device": device,
        "skip_tokenizer_init": True,
        "load_format": "dummy",
        "speculative_algorithm": algo,
        "max_running_requests": int(sched["max_num_seqs"]),
        "context_length": int(sched["max_model_len"]),
        "chunked_prefill_size": int(sched["max_num_batched_tokens"]) if sched.get("chunked_prefill", True) else -1,
        "disable_radix_cache": not cache["prefix_caching"],
        "mamba_ssm_dtype": cache["ssm_dtype"],
    }
    mapping: dict[str, Any] = {
        "speculative.method": {"speculative_algorithm": algo},
        "scheduler.max_num_seqs": {"max_running_requests": kwargs["max_running_requests"]},
        "scheduler.max_model_len": {"context_length": kwargs["context_length"]},
        "scheduler.max_num_batched_tokens": {"chunked_prefill_size": kwargs["chunked_prefill_size"]},
        "cache.prefix_caching": {"disable_radix_cache": kwargs["disable_radix_cache"]},
        "cache.ssm_dtype": {"mamba_ssm_dtype": kwargs["mamba_ssm_dtype"]},
    }
    if algo == "DSPARK":
        knobs = {"speculative_dspark_block_size": k, "speculative_num_draft_tokens": k + 1}
    elif algo in ("DFLASH", "NGRAM"):
        knobs = {"speculative_num_draft_tokens": k + 1}
    elif algo in EAGLE_STYLE:
        knobs = {"speculative_num_steps": k, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": k + 1}
    else:  # a registered algorithm this table does not know: pass k as SGLang's generic knob
        knobs = {"speculative_num_draft_tokens": k + 1}
    kwargs.update(knobs)
    mapping["speculative.num_speculative_tokens"] = knobs
    draft_dir = case["resolved"].get("draft_dir")
    if algo == "NEXTN":
        mapping["draft"] = {"speculative_draft_model_path": None, "note": "MTP drafts with the target's own layers"}
    elif draft_dir:
        kwargs["speculative_draft_model_path"] = draft_dir
        mapping["draft"] = {"speculative_draft_model_path": "<case draft dir>"}
    if algo == "NGRAM":
        mapping["speculative.ngram_prompt_lookup_min/max"] = {
            "note": "SGLang's NGRAM is trie-based (speculative_ngram_max_trie_depth, bfs breadth); "
                    "no prompt-lookup window knob, left at SGLang's defaults"}
    kv_dtype = cache.get("kv_cache_dtype", "bfloat16")
    if kv_dtype not in KV_CACHE_DTYPES:
        raise Unsupported(f"cache.kv_cache_dtype {kv_dtype!r}: SGLang 0.5.23's --kv-cache-dtype has no such choice "
                          "(auto, fp8_e5m2, fp8_e4m3, mxfp8, bf16, bfloat16, nvfp4, fp4_mx_block16)")
    kwargs["kv_cache_dtype"] = KV_CACHE_DTYPES[kv_dtype]
    mapping["cache.kv_cache_dtype"] = {"kv_cache_dtype": kwargs["kv_cache_dtype"],
                                       "note": "bfloat16 is SGLang's bf16 choice (also the shipped shapes' dtype)"}
    return kwargs, mapping
