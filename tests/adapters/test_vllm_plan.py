"""The vLLM 0.33 plan adapter through the real subprocess path (one probe process for the module).

Every expected value is either vLLM's (the observation) checked against an invariant computed
here from the observation's own fields, or computed here from the case file.
"""

from __future__ import annotations

import math

import pytest

from conformance import paths
from conformance.documents import observation
from conformance.documents.cases import load_all
from conformance.engines.registry import resolve_engine
from conformance.harness.plan_runner import plan_cases
from conformance.run.selection import select_cases

pytestmark = pytest.mark.oracle

UTILIZATION_CASES = ["tiny-dflash-c4-k8-util", "qwen35-27b-c32-k8-h100-util"]
CASE_PATTERNS = ["tiny-*", "drafting-table-*", "seed-unified-pool-c32-k8", *UTILIZATION_CASES]


# Cases vLLM (or plan mode) must refuse, written next to the test's tmp dir.
REFUSED = {
    # max_num_batched_tokens <= num_lookahead_tokens (k + 1 = 9): VllmConfig refuses.
    "refused-budget-below-lookahead": {"scheduler": {"max_num_seqs": 4, "max_model_len": 2048,
                                                     "max_num_batched_tokens": 8}},
    # all of the device's memory, where the CUDA context already holds some: request_memory refuses.
    "refused-utilization-above-free": {"memory": {"gpu_memory_utilization": 1.0}},
}


def _refused_cases(tmp_dir):
    import yaml

    from conformance.documents.cases import load_case

    base = yaml.safe_load((paths.cases_dir() / "tiny-dflash-c4-k8.yaml").read_text())
    out = []
    for case_id, patch in REFUSED.items():
        doc = dict(base, id=case_id, **patch)
        f = tmp_dir / f"{case_id}.yaml"
        f.write_text(yaml.safe_dump(doc))
        out.append(load_case(f))
    return out


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    from conformance.engines.venv import oracle_env

    if oracle_env(resolve_engine("vllm")).state() != "ready":
        pytest.skip("vLLM oracle venv not built (conformance envs install vllm)")
    cases, _ = select_cases(CASE_PATTERNS)
    refused = _refused_cases(tmp_path_factory.mktemp("vllm-refused"))
    # The same case again at the end: determinism within one process.
    again = [c for c in cases if c.id == "tiny-dflash-c4-k8"]
    obs = plan_cases(resolve_engine("vllm"), cases + refused + again)
    n = len(cases)
    by_id = {o["case_id"]: o for o in obs[n:n + len(refused)]}
    return {c.id: c for c in cases}, obs[:n], obs[n + len(refused):], by_id


def _ok(planned):
    cases, obs, _, _ = planned
    return [(cases[o["case_id"]], o) for o in obs if o["status"] == "ok"]


def test_every_case_is_schema_valid_and_not_error(planned):
    cases, obs, _, _ = planned
    assert [o["case_id"] for o in obs] == list(cases)
    for o in obs:
        observation.validate(o, o["case_id"])
        assert o["status"] != "error", o["message"]
        assert o["engine"] == {"name": "vllm", "version": "0.33.0"}


def test_budget_reflects_case_and_active_cap(planned):
    for case, o in _ok(planned):
        b, sched = o["budget"], case.spec["scheduler"]
        assert b["max_num_seqs"] == sched["max_num_seqs"]
        assert b["max_num_batched_tokens"] == sched["max_num_batched_tokens"]
        assert b["max_num_scheduled_tokens"] <= b["max_num_batched_tokens"]
        if case.spec["speculative"]["method"] in ("dflash", "dspark"):
            cap = b["max_num_batched_tokens"] // b["lookahead_tokens"]
            assert b["max_active_seqs"] == min(sched["max_num_seqs"], cap)
        else:
            assert b["max_active_seqs"] == sched["max_num_seqs"]


def test_active_cap_case_binds(planned):
    cases, obs, _, _ = planned
    o = next(o for o in obs if o["case_id"] == "tiny-dflash-active-cap-k8")
    b = o["budget"]
    k = cases["tiny-dflash-active-cap-k8"].spec["speculative"]["num_speculative_tokens"]
    assert b["lookahead_tokens"] == k + 1  # vLLM 0.33: DFlash's draft pass is k + 1 query rows
    assert b["max_active_seqs"] == b["max_num_batched_tokens"] // b["lookahead_tokens"] < b["max_num_seqs"]
    running = [s["num_scheduled_requests"] for s in o["trace"]["steps"]]
    assert max(running) <= b["max_active_seqs"]


def test_drafting_table_rows(planned):
    cases, obs, _, _ = planned
    rows = {o["case_id"].removeprefix("drafting-table-"): o for o in obs if o["case_id"].startswith("drafting-table-")}
    assert set(rows) == {"eagle3", "p-eagle", "dflash", "dspark", "mtp", "ngram", "draft_model", "pard"}
    for method, o in rows.items():
        if o["status"] != "ok":
            assert o["status"] == "refused" and o["refusal"]["by"] == "vllm" and o["message"]
            continue
        k = o["budget"]["num_speculative_tokens"]
        slots = o["budget"]["drafting_slots_per_request"]
        assert 0 <= slots <= k
        if method in ("p-eagle", "pard"):
            assert o["budget"]["parallel_drafting"] is True


def _kv_budget_bytes(case, o) -> int:
    """The bytes vLLM's KV planner received: the case's bound, or what the worker derived."""
    if "kv_cache_bytes" in case.spec["memory"]:
        return case.spec["memory"]["kv_cache_bytes"]
    return o["provenance"]["utilization"]["available_kv_cache_memory_bytes"]


def test_memory_ledger_and_pool(planned):
    for case, o in _ok(planned):
        m = o["memory"]
        pool = m["pool"]
        budget = _kv_budget_bytes(case, o)
        beside = {"weights", "workspace", "activations", "cuda_graphs", "cuda_context"}
        pool_ledger = {k: v for k, v in m["ledger_bytes"].items() if k not in beside}
        if "kv_cache_bytes" in case.spec["memory"]:
            assert m["bound_bytes"] == budget
            assert m["outside_bound"] == []
            assert set(m["ledger_bytes"]) == set(pool_ledger)
        assert pool["unified"] is True
        assert pool["size_bytes"] == pool["num_blocks"] * pool["bytes_per_block"] <= budget
        assert budget - pool["size_bytes"] < pool["bytes_per_block"]
        assert sum(pool_ledger.values()) == pool["num_blocks"] * pool["bytes_per_block"]
        assert pool["bytes_per_block"] % pool["page_size_bytes"] == 0
        per_seq_blocks = sum(g["blocks_per_sequence"] for g in pool["groups"])
        assert math.isclose(m["max_concurrency"], pool["num_blocks"] / per_seq_blocks)
        has_draft = case.spec["speculative"]["method"] != "ngram"
        assert (m["ledger_bytes"]["draft_kv"] > 0) == has_draft
        k = case.spec["speculative"]["num_speculative_tokens"]
        checkpoint = next((x["value"] for x in o["provenance"]["overrides"]
                           if x["name"] == "gdn_prefill_checkpoint_alignment_tokens"), None)
        # align mode keeps 2 + k slots, and one prefill checkpoint block where the GDN layers export them
        expect_slots = (2 + int(checkpoint is not None) if case.spec["cache"]["prefix_caching"] else 1) + k
        assert m["per_sequence"]["state_slots"] == expect_slots


def _gpu_memory_utilization(planned):
    cases, obs, _, _ = planned
    by_id = {o["case_id"]: o for o in obs}
    return [(cases[cid], by_id[cid]) for cid in UTILIZATION_CASES]


def test_utilization_kv_bytes_fit_what_the_device_leaves(planned):
    """KV bytes <= total x utilization - weights - what vLLM reserves beside the pool; every figure
    the worker derived is consistent with the others and with the profile and the case."""
    from conformance.documents.devices import get_profile

    for case, o in _gpu_memory_utilization(planned):
        assert o["status"] == "ok", o["message"]
        u, m = o["provenance"]["utilization"], o["memory"]
        total = get_profile(case.spec["device"]).total_memory_bytes
        util = case.spec["memory"]["gpu_memory_utilization"]
        assert u["total_memory_bytes"] == total
        assert u["requested_memory_bytes"] == m["bound_bytes"] == math.ceil(total * util)
        assert u["weights_bytes"] == u["target_weights_bytes"] + u["draft_weights_bytes"] == m["ledger_bytes"]["weights"]
        assert u["non_kv_cache_memory_bytes"] == u["total_consumed_bytes"] + u["transient_peak_headroom_bytes"]
        assert u["total_consumed_bytes"] >= u["weights_bytes"]
        assert u["available_kv_cache_memory_bytes"] == (u["requested_memory_bytes"] - u["non_kv_cache_memory_bytes"]
                                                        - u["cudagraph_memory_estimate_applied_bytes"])
        assert m["pool"]["size_bytes"] <= u["available_kv_cache_memory_bytes"] <= total * util - u["weights_bytes"]
        # Everything vLLM holds inside its requested memory fits it; the init usage sits outside.
        assert m["outside_bound"] == ["cuda_context"]
        inside = sum(v for k, v in m["ledger_bytes"].items() if k not in m["outside_bound"])
        assert inside <= m["bound_bytes"]
        assert m["ledger_bytes"]["cuda_context"] == u["init_used_bytes"] > 0


def test_utilization_weights_hold_the_shapes_largest_tensors(planned):
    """The weights vLLM's model classes hold are at least the bf16 embedding, lm_head and MLPs of the
    target's config.json; the draft adds less than the target."""
    import json

    for case, o in _gpu_memory_utilization(planned):
        cfg = json.loads((case.target_dir / "config.json").read_text())
        hidden, vocab = cfg["hidden_size"], cfg["vocab_size"]
        mlp = cfg["num_hidden_layers"] * 3 * hidden * cfg["intermediate_size"]
        u = o["provenance"]["utilization"]
        assert u["target_weights_bytes"] >= 2 * (2 * vocab * hidden + mlp)
        assert 0 < u["draft_weights_bytes"] < u["target_weights_bytes"]


def test_utilization_assumed_figures_are_named_with_their_sources(planned):
    for case, o in _gpu_memory_utilization(planned):
        prov = o["provenance"]
        assumed = {f["name"]: f for f in prov["assumed"]}
        assert set(assumed) == {"init_used_bytes", "other_consumed_bytes", "activation_peak_bytes",
                                "cudagraph_memory_bytes"}
        for f in assumed.values():
            assert isinstance(f["value_bytes"], int) and f["value_bytes"] >= 0 and f["source"]
        u = prov["utilization"]
        assert u["init_used_bytes"] == assumed["init_used_bytes"]["value_bytes"]
        assert u["transient_peak_headroom_bytes"] == assumed["activation_peak_bytes"]["value_bytes"]
        assert u["cudagraph_memory_estimate_bytes"] == assumed["cudagraph_memory_bytes"]["value_bytes"]
        assert u["total_consumed_bytes"] - u["weights_bytes"] == assumed["other_consumed_bytes"]["value_bytes"]
        assert prov["mapping"]["memory.gpu_memory_utilization"]["value"] == case.spec["memory"]["gpu_memory_utilization"]
        assert {"vllm.v1.worker.utils.request_memory", "vllm.v1.worker.gpu_worker.Worker.determine_available_memory",
                "vllm.utils.mem_utils.memory_profiling"} <= set(prov["functions"])
        assert {"emulated device", "emulated worker", "weights on the meta device"} <= {g["name"] for g in prov["glue"]}


def test_utilization_trace_is_the_byte_budget_cases(planned):
    """A pool far larger than the workload needs schedules as the byte-budget case does (deriving the
    bytes leaves the config the trace runs on as it was)."""
    cases, obs, _, _ = planned
    by_id = {o["case_id"]: o for o in obs}
    util, kv = by_id["tiny-dflash-c4-k8-util"], by_id["tiny-dflash-c4-k8"]
    assert util["budget"] == kv["budget"]
    assert util["trace"] == kv["trace"]


def test_trace_within_budget_and_completes(planned):
    for case, o in _ok(planned):
        steps = o["trace"]["steps"]
        b, wl = o["budget"], case.spec["workload"]
        assert steps
        for s in steps:
            assert s["total_num_scheduled_tokens"] <= b["max_num_scheduled_tokens"]
            assert s["num_scheduled_requests"] <= b["max_num_seqs"]
            assert s["num_spec_tokens"] <= s["num_scheduled_requests"] * b["num_speculative_tokens"]
        # Every request produced output_tokens tokens: 1 + accepted per sampling step. Only the
        # pressure cases are built to preempt.
        if "pressure" not in case.spec.get("tags", []):
            assert sum(s["num_preempted"] for s in steps) == 0
        sampled = sum(s["num_sampling_requests"] + s["num_accepted_tokens"] for s in steps)
        assert sampled >= wl["num_requests"] * wl["output_tokens"]


def test_provenance_names_overrides_and_glue(planned):
    for case, o in _ok(planned):
        prov = o["provenance"]
        names = {x["name"] for x in prov["overrides"]}
        assert {"VLLM_USE_V2_MODEL_RUNNER", "cache_config.block_size", "mamba_ssm_cache_dtype",
                "scheduler_config.async_scheduling"} <= names
        glue = {g["name"] for g in prov["glue"]}
        assert {"scheduler loop", "fake ModelRunnerOutput", "hand-built KV specs", "ledger attribution"} <= glue
        assert "vllm.v1.core.kv_cache_planning.get_kv_cache_configs" in prov["functions"]
        if "kv_cache_bytes" in case.spec["memory"]:
            assert prov["mapping"]["memory.kv_cache_bytes"]["value"] == case.spec["memory"]["kv_cache_bytes"]


def test_deterministic(planned):
    _, obs, again, _ = planned
    first = next(o for o in obs if o["case_id"] == "tiny-dflash-c4-k8")
    assert observation.strip_volatile(first) == observation.strip_volatile(again[0])


def test_refusals_carry_the_refusers_words(planned):
    *_, refused = planned
    below = refused["refused-budget-below-lookahead"]
    assert below["status"] == "refused" and below["refusal"]["by"] == "vllm"
    # vLLM's own wording (VllmConfig._set_max_num_scheduled_tokens), not the adapter's.
    assert "does not have enough slots" in below["message"] and "num_lookahead_tokens=9" in below["message"]
    # vLLM's own wording (vllm.v1.worker.utils.request_memory): the CUDA context leaves less free.
    util = refused["refused-utilization-above-free"]
    assert util["status"] == "refused" and util["refusal"]["by"] == "vllm"
    assert "is less than desired GPU memory utilization (1.0" in util["message"] and util["budget"] is None


def _override(obs, name):
    return next(o for o in obs["provenance"]["overrides"] if o["name"] == name)


def test_device_choices_come_from_vllm_selection_per_profile(planned):
    """B200 (SM100): vLLM's priority list puts FlashInfer first for causal layers and FlashAttention
    for the non-causal DFlash draft, so the draft gets a KV group of its own; SM90 / SM121 pick
    FlashAttention for both. The GDN prefill kernel is FlashInfer only on SM90 for the tiny shapes
    (head_k_dim 32), so only SM90 align-mode plans carry the 64-token checkpoint alignment."""
    _, obs, _, _ = planned
    by_id = {o["case_id"]: o for o in obs}
    choices = {d: _override(by_id[f"tiny-dflash-c4-k8-{d}"], "attention_backend")["value"] for d in ("h100", "b200", "gb10")}
    assert choices["b200"]["attention_backend"] == "FLASHINFER"
    assert choices["b200"]["draft_attention_backend"] == "FLASH_ATTN"
    assert choices["gb10"]["attention_backend"] == choices["h100"]["attention_backend"] == "FLASH_ATTN"
    assert [choices[d]["gdn_prefill_backend"] for d in ("h100", "b200", "gb10")] == ["flashinfer", "triton", "triton"]
    b200_groups = by_id["tiny-dflash-c4-k8-b200"]["memory"]["pool"]["groups"]
    assert ["draft_kv"] in [g["categories"] for g in b200_groups]
    h100 = by_id["tiny-dflash-c4-k8-h100"]
    assert _override(h100, "gdn_prefill_checkpoint_alignment_tokens")["value"] == 64
    assert h100["memory"]["pool"]["block_size_tokens"] % 64 == 0
    assert _override(by_id["tiny-dflash-c4-k8"], "gdn_prefill_checkpoint_alignment_tokens")["value"] is None


def test_trace_is_the_async_engines_by_default_and_sync_on_request(planned, tmp_path):
    """h200's GPU default is async: AsyncScheduler, and a request past its prefill is scheduled
    again before its output arrives (the step after a prefill already verifies k drafts)."""
    _, obs, _, _ = planned
    o = next(x for x in obs if x["case_id"] == "tiny-dflash-c4-k8")
    assert o["trace"]["scheduler_cls"] == "AsyncScheduler" and o["trace"]["scheduling"] == "async"
    assert _override(o, "scheduler_config.async_scheduling")["value"] is True
    from conformance.cli.commands.plan import synchronous

    sync_case = synchronous(next(c for c in load_all() if c.id == "tiny-dflash-c4-k8"))
    (s,) = plan_cases(resolve_engine("vllm"), [sync_case])
    assert s["trace"]["scheduler_cls"] == "Scheduler" and s["trace"]["scheduling"] == "sync"
    assert [x["total_num_scheduled_tokens"] for x in s["trace"]["steps"]] != \
        [x["total_num_scheduled_tokens"] for x in o["trace"]["steps"]]
