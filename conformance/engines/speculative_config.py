"""A case's speculative configuration as vLLM's `--speculative-config` JSON: the one builder.

Contract: `speculative_config(case)` is what vLLM 0.33 is given for a case (`Case.to_json()`): in
plan mode as `EngineArgs(speculative_config=...)` (`adapters.vllm.config`), served as `vllm serve
--speculative-config` (`adapters.vllm.live`, with `served=True`), and, with `vllm_names=False`, as
the `{speculative_config}` placeholder the reference engine's server and a port's take (the case's
own method names, which their drafting tables know, and no vLLM-only knob). Imports no vLLM.

- method: the case's method as vLLM names it (`METHODS`: P-EAGLE and PARD are the parallel variants of
  eagle3 and draft_model, `parallel_drafting`); with `vllm_names=False` the case's name.
- model: the drafter's directory, where the case has one (MTP and ngram have none).
- acceptance: synthetic maps to `rejection_sample_method: synthetic` with
  `synthetic_acceptance_length` / `synthetic_acceptance_rates`; served, a fixed n maps to a synthetic
  length n + 1, which vLLM's minimum-variance schedule turns into exactly n accepted drafts per step (plan
  mode drives fixed acceptance in the adapters' own traces); `model` leaves the drafter to decide.
- ngram: the case's `ngram_prompt_lookup_max` / `_min` as vLLM's `prompt_lookup_max` / `_min`.
"""

from __future__ import annotations

from typing import Any

# Case method -> (vLLM speculative method, parallel_drafting). The upstream table
# (SpeculativeConfig.max_num_new_slots_for_drafting) names P-EAGLE and PARD as the parallel
# variants of eagle3 and draft_model.
METHODS: dict[str, tuple[str, bool]] = {
    "dflash": ("dflash", False),
    "eagle3": ("eagle3", False),
    "p-eagle": ("eagle3", True),
    "dspark": ("dspark", False),
    "mtp": ("mtp", False),
    "ngram": ("ngram", False),
    "draft_model": ("draft_model", False),
    "pard": ("draft_model", True),
}
NGRAM_KNOBS = (("ngram_prompt_lookup_max", "prompt_lookup_max"), ("ngram_prompt_lookup_min", "prompt_lookup_min"))


def speculative_config(case: dict[str, Any], *, served: bool = False, vllm_names: bool = True) -> dict[str, Any]:
    """The case's `--speculative-config` (see the module's contract for `served` and `vllm_names`)."""
    spec = case["speculative"]
    method, parallel = METHODS[spec["method"]] if vllm_names else (spec["method"], False)
    doc: dict[str, Any] = {"method": method, "num_speculative_tokens": int(spec["num_speculative_tokens"])}
    if parallel:
        doc["parallel_drafting"] = True
    draft_dir = case["resolved"].get("draft_dir")
    if draft_dir:
        doc["model"] = draft_dir
    acc = case["acceptance"]
    if acc["mode"] == "synthetic":
        doc["rejection_sample_method"] = "synthetic"
        if "mean_acceptance_length" in acc:
            doc["synthetic_acceptance_length"] = float(acc["mean_acceptance_length"])
        else:
            doc["synthetic_acceptance_rates"] = [float(r) for r in acc["acceptance_rates"]]
    elif acc["mode"] == "fixed" and served:
        doc["rejection_sample_method"] = "synthetic"
        doc["synthetic_acceptance_length"] = float(acc["accepted_tokens"]) + 1.0
    if vllm_names and spec["method"] == "ngram":
        for case_key, knob in NGRAM_KNOBS:
            if case_key in spec:
                doc[knob] = spec[case_key]
    return doc
