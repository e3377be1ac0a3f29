"""The SGLang 0.5.23 plan adapter, through the real subprocess path (`runner.plan_cases`).

One SGLang process plans every shipped case (the 27B seed cases traced on their full pools, whose
storage is never materialised), then A, B, A again (isolation), traced cases again (determinism),
plus cases written here (a method SGLang lacks, a lone request, a byte-budget case planned right
after a gpu_memory_utilization one): ~60 s, ~1.5 GB.
Expected numbers come from SGLang's own code (the observation) checked against independent
arithmetic on the shapes' config.json, never from constants typed here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from conformance import paths
from conformance.documents import observation
from conformance.documents.cases import load_all, load_case
from conformance.engines.registry import resolve_engine

pytestmark = pytest.mark.oracle

ISOLATION_A = "tiny-sglang-mamba-cap"
ISOLATION_B = "seed-unified-pool-c32-k8"
TRACED = "tiny-dflash-c4-k8"
SYNTHETIC_MEAN = "tiny-pressure-align-admission"  # synthetic mean_acceptance_length, radix cache + mamba extra buffer
EAGLE = "drafting-table-eagle3"
RETRACTS = "tiny-sglang-retract"  # SGLang's retract_decode sends a running request back to the queue
SEED_CASES = ("seed-unified-pool-c32-k8", "seed-draft-kv-c8", "seed-draft-kv-c32")
MIB_BYTES = 1 << 20
# Traced through SGLang's mamba extra buffer (hybrid model, radix cache on) or a non-DFLASH decode path.
UTILIZATION = "tiny-dflash-c4-k8-util"
UTILIZATION_REFUSED = "qwen35-27b-c32-k8-h100-util"   # the 27B weights leave SGLang's static fraction no KV room
NEWLY_TRACED = ("tiny-sglang-mamba-cap", "tiny-dflash-c32-k8-align", "tiny-pressure-align-admission",
                "tiny-pressure-align-preempt", "drafting-table-eagle3", "drafting-table-draft_model",
                "drafting-table-ngram", "drafting-table-mtp")


def _oracle_ready() -> bool:
    from conformance.engines.venv import oracle_env

    return oracle_env(resolve_engine("sglang")).state() == "ready"


def _variant(tmp: Path, base: str, new_id: str, mutate) -> Path:
    doc = yaml.safe_load((paths.cases_dir() / f"{base}.yaml").read_text())
    doc["id"] = new_id
    mutate(doc)
    out = tmp / f"{new_id}.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out


@pytest.fixture(scope="module")
def planned(tmp_path_factory) -> dict:
    if not _oracle_ready():
        pytest.skip("the sglang-0.5.23 oracle venv is not built (python -m conformance.engines.envs install sglang)")
    from conformance.harness.plan_runner import plan_cases

    tmp = tmp_path_factory.mktemp("sglang-cases")
    shipped = load_all()
    by_id = {c.id: c for c in shipped}
    lacking = load_case(_variant(tmp, "tiny-dflash-c4-k8", "tmp-pard", lambda d: d["speculative"].update(method="pard")))
    lone = load_case(_variant(tmp, TRACED, "tmp-lone", lambda d: d["workload"].update(num_requests=1)))
    order = shipped + [by_id[ISOLATION_B], by_id[ISOLATION_A], by_id[TRACED], by_id[SYNTHETIC_MEAN], by_id[EAGLE],
                       lone, lacking, by_id[UTILIZATION], by_id[TRACED]]
    obs = plan_cases(resolve_engine("sglang"), order)
    assert len(obs) == len(order)
    n = len(shipped)
    return {"cases": by_id, "shipped": obs[:n], "repeat_b": obs[n], "repeat_a": obs[n + 1],
            "repeats": {TRACED: obs[n + 2], SYNTHETIC_MEAN: obs[n + 3], EAGLE: obs[n + 4]},
            "lone": (lone.spec, obs[n + 5]), "lacking": obs[n + 6], "after_util": obs[n + 8]}


def _by_id(planned: dict, case_id: str) -> dict:
    return next(o for o in planned["shipped"] if o["case_id"] == case_id)


def test_every_shipped_case_is_ok_or_refused(planned):
    for obs in planned["shipped"]:
        assert obs["status"] in ("ok", "refused"), f"{obs['case_id']}: {obs['message']}"
        observation.validate(obs, obs["case_id"])
        assert obs["engine"]["version"] == "0.5.23"


def test_replanning_a_after_b_is_byte_identical(planned):
    first_a = observation.strip_volatile(_by_id(planned, ISOLATION_A))
    again_a = observation.strip_volatile(planned["repeat_a"])
    assert json.dumps(first_a, sort_keys=True) == json.dumps(again_a, sort_keys=True)
    first_b = observation.strip_volatile(_by_id(planned, ISOLATION_B))
    assert json.dumps(first_b, sort_keys=True) == json.dumps(observation.strip_volatile(planned["repeat_b"]), sort_keys=True)


def test_mamba_state_cache_caps_running_requests(planned):
    obs = _by_id(planned, ISOLATION_A)
    budget, pool = obs["budget"], obs["memory"]["pool"]
    assert obs["status"] == "ok"
    assert budget["max_active_seqs"] < budget["max_num_seqs"]
    slots = obs["memory"]["per_sequence"]["state_slots"]
    # SGLang's own rule, recomputed from the numbers it reported: slots // slots-per-request.
    assert budget["max_active_seqs"] == pool["max_mamba_cache_size"] // slots
    assert f"capped to {budget['max_active_seqs']} by the mamba state cache" in obs["message"]


def test_uncapped_cases_seat_what_they_ask(planned):
    for case_id in ("seed-unified-pool-c32-k8", "seed-draft-kv-c8", "seed-draft-kv-c32", "tiny-dflash-c4-k8"):
        obs = _by_id(planned, case_id)
        assert obs["budget"]["max_active_seqs"] == obs["budget"]["max_num_seqs"], case_id
        assert "by the mamba state cache" not in (obs["message"] or ""), case_id


def _kv_bytes_per_token(config: dict, attention_layers: int) -> int:
    heads, dim = config["num_key_value_heads"], config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return attention_layers * heads * dim * 2 * 2  # K and V, bfloat16


def test_cell_sizes_match_the_shapes(planned):
    for obs in planned["shipped"]:
        case = planned["cases"][obs["case_id"]]
        if obs["status"] != "ok" or case.spec["speculative"]["method"] != "dflash":
            continue
        target = json.loads((case.target_dir / "config.json").read_text())
        draft = json.loads((case.draft_dir / "config.json").read_text())
        full = sum(1 for t in target["layer_types"] if t == "full_attention")
        per_seq = obs["memory"]["per_sequence"]
        assert per_seq["target_kv_bytes_per_token"] == _kv_bytes_per_token(target, full)
        assert per_seq["draft_kv_bytes_per_token"] == _kv_bytes_per_token(draft, draft["num_hidden_layers"])


def test_ledger_fills_the_bound(planned):
    for obs in planned["shipped"]:
        if obs["status"] != "ok" or "gpu_memory_utilization" in planned["cases"][obs["case_id"]].spec["memory"]:
            continue
        mem = obs["memory"]
        inside = sum(v for k, v in mem["ledger_bytes"].items() if k not in mem["outside_bound"])
        slack = mem["bound_bytes"] - inside
        # Everything inside the bound fits it, and what is left is under one page of the
        # token cell (SGLang floors tokens to pages) plus float rounding of the GB arithmetic.
        assert 0 <= slack < mem["pool"]["page_size_bytes"] + 1024, (obs["case_id"], slack)


def test_budget_fields(planned):
    obs = _by_id(planned, "seed-unified-pool-c32-k8")
    budget = obs["budget"]
    case = planned["cases"]["seed-unified-pool-c32-k8"].spec
    k = case["speculative"]["num_speculative_tokens"]
    assert budget["num_draft_tokens_per_step"] == k + 1  # the DFlash block: k drafts + the anchor
    assert budget["chunked_prefill_size"] == case["scheduler"]["max_num_batched_tokens"]
    assert budget["max_num_batched_tokens"] is None and budget["lookahead_tokens"] is None
    assert budget["decode_reserved_tokens_per_request"] == 2 * (k + 1)
    names = {o["name"] for o in obs["provenance"]["overrides"]}
    assert "sglang.srt.arg_groups.memory_hook.get_device_memory_capacity" in names
    assert obs["provenance"]["resolved"]["attention_backend"] == "fa3"


def test_method_sglang_lacks_is_refused_in_its_words(planned):
    obs = planned["lacking"]
    assert obs["status"] == "refused"
    assert "Unknown speculative algorithm name: pard" in obs["message"]


def test_gpu_memory_utilization_is_mem_fraction_static(planned):
    """SGLang sizes the pools from the memory free on the profile's device: KV budget <= what the
    weights leave less SGLang's non-static share; the pools fit the budget; the weights and the
    pools fit the case's bound."""
    from conformance.documents.devices import get_profile

    case = planned["cases"][UTILIZATION].spec
    obs = _by_id(planned, UTILIZATION)
    assert obs["status"] == "ok", obs["message"]
    prov, mem = obs["provenance"], obs["memory"]
    fraction = case["memory"]["gpu_memory_utilization"]
    assert prov["mapping"]["memory.gpu_memory_utilization"]["mem_fraction_static"] == fraction
    assert prov["resolved"]["mem_fraction_static"] == fraction
    u = prov["utilization"]
    total = get_profile(case["device"]).total_memory_bytes
    assert u["total_memory_bytes"] == total and u["mem_fraction_static"] == fraction
    assert u["weights_bytes"] == u["target_weights_bytes"] + u["draft_weights_bytes"] == mem["ledger_bytes"]["weights"]
    gib = 1 << 30
    assert math.isclose(u["pre_model_load_memory_gb"] * gib, total - u["init_used_bytes"])
    assert math.isclose(u["available_gpu_memory_gb"] * gib, total - u["init_used_bytes"] - u["weights_bytes"])
    # SGLang's slack is at least (1 - fraction) of the pre-load memory.
    assert u["kv_budget_gb"] <= u["available_gpu_memory_gb"] - u["pre_model_load_memory_gb"] * (1 - fraction) + 1e-9
    pools = sum(mem["ledger_bytes"][k] for k in ("attention_kv", "draft_kv", "recurrent_state", "intermediate_state"))
    assert pools <= u["kv_budget_gb"] * gib
    assert mem["bound_bytes"] == int(fraction * total)
    inside = sum(v for k, v in mem["ledger_bytes"].items() if k not in mem["outside_bound"])
    assert inside <= mem["bound_bytes"]
    assert mem["outside_bound"] == ["cuda_context", "req_to_token"]
    assumed = {f["name"]: f for f in prov["assumed"]}
    assert assumed["init_used_bytes"]["value_bytes"] == u["init_used_bytes"] == mem["ledger_bytes"]["cuda_context"]
    assert all(f["source"] for f in assumed.values())
    assert {"KVCacheConfigurator._profile_available_bytes", "sglang.srt.model_loader.get_model"} <= set(prov["functions"])
    assert {"emulated free memory", "weights on the meta device"} <= {g["name"] for g in prov["glue"]}


def test_gpu_memory_utilization_weights_hold_the_shapes_largest_tensors(planned):
    case = planned["cases"][UTILIZATION]
    cfg = json.loads((case.target_dir / "config.json").read_text())
    hidden, vocab = cfg["hidden_size"], cfg["vocab_size"]
    mlp = cfg["num_hidden_layers"] * 3 * hidden * cfg["intermediate_size"]
    u = _by_id(planned, UTILIZATION)["provenance"]["utilization"]
    assert u["target_weights_bytes"] >= 2 * (2 * vocab * hidden + mlp)
    assert 0 < u["draft_weights_bytes"] < u["target_weights_bytes"]


def test_gpu_memory_utilization_refusal_is_sglangs(planned):
    obs = _by_id(planned, UTILIZATION_REFUSED)
    assert obs["status"] == "refused"
    assert "Loaded weights leave no GPU memory for the KV cache" in obs["message"]


def test_byte_budget_plan_after_a_utilization_plan_is_unchanged(planned):
    """Sizing from the device's memory leaves no state behind (process groups, patched probes)."""
    first = observation.strip_volatile(_by_id(planned, TRACED))
    again = observation.strip_volatile(planned["after_util"])
    assert json.dumps(first, sort_keys=True) == json.dumps(again, sort_keys=True)


def _traced(planned: dict) -> list[dict]:
    return [o for o in planned["shipped"] if o["status"] == "ok" and o["trace"] is not None]


def test_traces_exist_where_expected(planned):
    ids = {o["case_id"] for o in _traced(planned)}
    assert TRACED in ids and "tiny-dflash-active-cap-k8" in ids and RETRACTS in ids
    for case_id in SEED_CASES:
        assert case_id in ids, (case_id, _by_id(planned, case_id)["message"])
    for obs in planned["shipped"]:
        if obs["status"] == "ok" and obs["trace"] is None:
            assert "no trace" in obs["message"] and obs["provenance"]["trace"].startswith("not produced")


def test_prefill_steps_stay_in_sglang_budgets(planned):
    for obs in _traced(planned):
        budget = obs["budget"]
        for step in obs["trace"]["steps"]:
            if step["phase"] == "prefill":
                assert step["total_num_scheduled_tokens"] <= budget["chunked_prefill_size"], obs["case_id"]
                assert step["total_num_scheduled_tokens"] <= budget["max_prefill_tokens"], obs["case_id"]
                assert step["num_spec_tokens"] == 0


def test_running_requests_never_exceed_max_active_seqs(planned):
    for obs in _traced(planned):
        most = max(s["num_running"] for s in obs["trace"]["steps"])
        assert most <= obs["budget"]["max_active_seqs"], obs["case_id"]


def test_every_prompt_token_is_prefilled_once(planned):
    """Without a retraction each prompt is prefilled once; a retracted request is prefilled again, past
    what the radix cache still holds of it (at most its prompt and the outputs it had)."""
    for obs in _traced(planned):
        wl = planned["cases"][obs["case_id"]].spec["workload"]
        steps = obs["trace"]["steps"]
        prefilled = sum(s["total_num_scheduled_tokens"] for s in steps if s["phase"] == "prefill")
        admitted = sum(s["num_scheduled_requests"] for s in steps if s["phase"] == "prefill")
        retracted = sum(s["num_preempted"] for s in steps)
        prompts = wl["num_requests"] * wl["prompt_tokens"]
        if obs["case_id"] != RETRACTS:
            assert retracted == 0, obs["case_id"]
        if retracted == 0:
            assert prefilled == prompts, obs["case_id"]
            assert admitted >= wl["num_requests"], obs["case_id"]  # chunked prompts count once per chunk
        else:
            assert prompts < prefilled <= prompts + retracted * (wl["prompt_tokens"] + wl["output_tokens"])


def test_sglang_retracts_a_running_request(planned):
    """The retraction case: some decode step's check_decode_mem fails and retract_decode sends running
    requests back to the queue; they are re-admitted by a later prefill and every request finishes."""
    obs = _by_id(planned, RETRACTS)
    assert obs["status"] == "ok" and obs["trace"] is not None, obs["message"]
    steps = obs["trace"]["steps"]
    retracting = [i for i, s in enumerate(steps) if s["num_preempted"] > 0]
    assert retracting, "SGLang retracted nothing"
    first = retracting[0]
    step, before = steps[first], steps[first - 1]
    assert step["phase"] == "decode" and before["phase"] == "decode"
    assert step["num_running"] == before["num_running"] - step["num_preempted"]
    assert step["num_waiting"] == before["num_waiting"] + step["num_preempted"]
    assert any(s["phase"] == "prefill" for s in steps[first + 1:]), "the retracted request was never re-admitted"
    # The waiting queue: prefills take every request out of it once, plus once per retraction, and only a
    # retraction puts one back.
    wl = planned["cases"][RETRACTS].spec["workload"]
    waiting, admitted, requeued = wl["num_requests"], 0, 0
    for s in steps:
        if s["phase"] == "prefill":
            admitted += waiting - s["num_waiting"]
        else:
            assert s["num_waiting"] - waiting == s["num_preempted"], s
            requeued += s["num_preempted"]
        waiting = s["num_waiting"]
    assert waiting == 0 and admitted == wl["num_requests"] + requeued and requeued > 0
    end = obs["provenance"]["trace_end_state"]
    assert end["req_free_rows"] == end["req_rows"] and end["kv_tree_protected_tokens"] == 0


def test_decode_steps_verify_the_draft_block(planned):
    for obs in _traced(planned):
        block = obs["budget"]["num_draft_tokens_per_step"]
        for step in obs["trace"]["steps"]:
            if step["phase"] == "decode":
                assert step["total_num_scheduled_tokens"] == step["num_scheduled_requests"] * block
                assert step["num_spec_tokens"] == step["num_scheduled_requests"] * (block - 1)


def test_lone_request_decode_steps(planned):
    case, obs = planned["lone"]
    wl, k = case["workload"], case["speculative"]["num_speculative_tokens"]
    per_verify = min(case["acceptance"]["accepted_tokens"], k) + 1
    # The prefill samples the first output token; each verify commits accepted + bonus. Under
    # SGLang's overlap loop the next decode is scheduled before the finishing verify's result is
    # processed, so one more (overshoot) verify runs and accepts nothing.
    committing = math.ceil((wl["output_tokens"] - 1) / per_verify)
    overshoot = 1 if obs["trace"]["loop"] == "event_loop_overlap" else 0
    steps = obs["trace"]["steps"]
    decode = [s for s in steps if s["phase"] == "decode"]
    assert len(decode) == committing + overshoot
    assert sum(s["num_accepted_tokens"] for s in decode) == committing * (per_verify - 1)
    assert sum(s["total_num_scheduled_tokens"] for s in steps if s["phase"] == "prefill") == wl["prompt_tokens"]


@pytest.mark.parametrize("case_id", [TRACED, SYNTHETIC_MEAN, EAGLE])
def test_trace_is_deterministic(planned, case_id):
    first = _by_id(planned, case_id)
    again = planned["repeats"][case_id]
    assert first["trace"] is not None, first["message"]
    assert json.dumps(first["trace"], sort_keys=True) == json.dumps(again["trace"], sort_keys=True)
    assert first["provenance"]["trace_pools"] == again["provenance"]["trace_pools"]
    assert first["provenance"]["trace_end_state"] == again["provenance"]["trace_end_state"]


def test_newly_traced_cases_have_traces(planned):
    for case_id in NEWLY_TRACED:
        obs = _by_id(planned, case_id)
        assert obs["status"] == "ok" and obs["trace"] is not None, (case_id, obs["message"])
        assert obs["trace"]["steps"], case_id
        phases = {s["phase"] for s in obs["trace"]["steps"]}
        assert phases == {"prefill", "decode"}, case_id


def test_mamba_cap_trace_stays_under_the_cap(planned):
    obs = _by_id(planned, ISOLATION_A)
    assert obs["trace"] is not None, obs["message"]
    cap = obs["budget"]["max_active_seqs"]
    steps = obs["trace"]["steps"]
    assert max(s["num_running"] for s in steps) <= cap
    # The cap binds: some step runs `cap` requests while others still wait.
    assert any(s["num_running"] == cap and s["num_waiting"] > 0 for s in steps)
    wl = planned["cases"][ISOLATION_A].spec["workload"]
    assert sum(s["num_scheduled_requests"] for s in steps if s["phase"] == "prefill") == wl["num_requests"]
    # Traced on the pool SGLang sized.
    assert obs["provenance"]["trace_end_state"]["mamba_slots"] == obs["memory"]["pool"]["max_mamba_cache_size"]


def test_pools_hold_nothing_protected_at_the_end(planned):
    for obs in _traced(planned):
        end = obs["provenance"]["trace_end_state"]
        cid = obs["case_id"]
        assert end["kv_free_tokens"] + end["kv_tree_evictable_tokens"] == end["kv_tokens"], (cid, end)
        assert end["kv_tree_protected_tokens"] == 0, (cid, end)
        assert end["req_free_rows"] == end["req_rows"], (cid, end)
        assert end["kv_tokens"] == obs["memory"]["pool"]["max_total_num_tokens"], (cid, end)
        if "mamba_slots" in end:
            assert end["mamba_free_slots"] + end["mamba_tree_evictable_slots"] == end["mamba_slots"], (cid, end)
            assert end["mamba_tree_protected_slots"] == 0, (cid, end)
            assert end["mamba_slots"] == obs["memory"]["pool"]["max_mamba_cache_size"], (cid, end)
        if not planned["cases"][cid].spec["cache"]["prefix_caching"]:
            assert end["kv_free_tokens"] == end["kv_tokens"], (cid, end)


def test_trace_pools_are_sglangs_sizes_unmaterialised(planned):
    """The trace's pools are the ones SGLang sized, in the bytes SGLang's own ledger counts (the target's
    KV, the mamba state slots and at most the verify scratch SGLang reserved; the draft worker's KV is not built),
    and none of those bytes is in host RAM: only the index bookkeeping is."""
    for obs in _traced(planned):
        pools, ledger, pool = obs["provenance"]["trace_pools"], obs["memory"]["ledger_bytes"], obs["memory"]["pool"]
        cid = obs["case_id"]
        assert pools["storage_device"] == "meta", cid
        padding = pool["block_size_tokens"] * obs["memory"]["per_sequence"]["target_kv_bytes_per_token"]
        least = ledger["attention_kv"] + ledger["recurrent_state"]
        most = least + ledger["intermediate_state"] + padding
        assert least <= pools["unmaterialised_bytes"] <= most, (cid, pools, ledger)
        # Bookkeeping: the req_to_token table and index tensors of at most two int64 words per KV token, mamba
        # slot or request row (free lists, per-slot and per-request indices), each with a padding page or slot.
        indexed = (pool["max_total_num_tokens"] + (pool["max_mamba_cache_size"] or 0) + obs["budget"]["max_active_seqs"]
                   + 3 * pool["block_size_tokens"])
        assert pools["materialised_bytes"] <= ledger["req_to_token"] + 16 * indexed, (cid, pools, indexed)
    for case_id in SEED_CASES:
        pools = _by_id(planned, case_id)["provenance"]["trace_pools"]
        assert pools["unmaterialised_bytes"] > 10 * 1024 * MIB_BYTES > 1000 * pools["materialised_bytes"], case_id


def test_synthetic_mean_acceptance_matches_sglang_simulation(planned):
    """SGLANG_SIMULATE_ACC_LEN's match-expected draw commits floor(mean) or floor(mean) + 1 tokens per verify
    (drafts + bonus), so the drafts accepted over the run lie between what those two lengths give."""
    checked = 0
    for obs in _traced(planned):
        spec = planned["cases"][obs["case_id"]].spec
        acc, wl = spec["acceptance"], spec["workload"]
        if acc["mode"] != "synthetic" or "mean_acceptance_length" not in acc:
            continue
        steps = obs["trace"]["steps"]
        if sum(s["num_preempted"] for s in steps):
            continue
        block = obs["budget"]["num_draft_tokens_per_step"]
        low = max(1, min(block, math.floor(acc["mean_acceptance_length"])))
        high = min(block, low + 1)
        accepted = sum(s["num_accepted_tokens"] for s in steps)
        # Verifies commit every output token but the prefill's first; the last may run past max_new_tokens.
        least = wl["num_requests"] * (wl["output_tokens"] - 1)
        most = least + wl["num_requests"] * (high - 1)
        assert least * (low - 1) / low <= accepted <= most * (high - 1) / high, (obs["case_id"], accepted)
        checked += 1
    assert checked, "no traced case uses synthetic mean_acceptance_length"
