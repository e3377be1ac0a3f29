"""Plan adapter of the reference engine (the in-env adapter contract of conformance.engines.engine_file).

Maps the case to an `EngineConfig` (every mapping recorded in provenance.mapping), plans
budgets and memory, builds the unified pool for sizes only (plan mode never allocates), and
runs the engine's scheduler over the case's workload and acceptance model. Field meanings are
those of the vLLM adapter: budget.*, memory.ledger_bytes (the pool's bytes by category plus
weights / activations / workspace beside it), per_sequence for one max_model_len sequence,
pool, max_concurrency (num_blocks / blocks one full-length sequence needs), trace.steps.

Workload (the same as the vLLM adapter's, so traces compare): num_requests prompts of
prompt_tokens ids from random.Random(seed), each asking for exactly output_tokens tokens (EOS
ignored); sampled and draft ids from random.Random(seed + 2); synthetic acceptance draws from
random.Random(seed + 1).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from conformance.documents import observation
from conformance.documents.devices import get_profile

ENGINE = "reference"

FUNCTIONS = (
    "engine_under_test.config.EngineConfig",
    "engine_under_test.budget.resolve_budget",
    "engine_under_test.drafting.drafting_budget",
    "engine_under_test.memory.specs.build_layer_specs",
    "engine_under_test.memory.groups.group_layers",
    "engine_under_test.memory.planner.plan_memory",
    "engine_under_test.pool.UnifiedPool",
    "engine_under_test.scheduler.scheduler.Scheduler.schedule",
    "engine_under_test.scheduler.scheduler.Scheduler.update_from_output",
    "engine_under_test.engine_plan.simulate",
)


def engine_version() -> str:
    import engine_under_test

    return engine_under_test.__version__


def to_engine_config(case: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The case as engine knobs, and the mapping case field -> knob = value."""
    from engine_under_test.config import EngineConfig, SpeculativeConfig

    res, sch, mem, cache, sp = case["resolved"], case["scheduler"], case["memory"], case["cache"], case["speculative"]
    draft_dir = res.get("draft_dir")
    spec = SpeculativeConfig(method=sp["method"], num_speculative_tokens=sp["num_speculative_tokens"],
                             model=Path(draft_dir) if draft_dir else None)
    kwargs: dict[str, Any] = {}
    mapping: dict[str, Any] = {
        "target": {"model": res["target_dir"]}, "draft": {"speculative_config.model": draft_dir},
        "speculative.method": {"speculative_config.method": sp["method"]},
        "speculative.num_speculative_tokens": {"speculative_config.num_speculative_tokens": sp["num_speculative_tokens"]},
        "scheduler.max_num_seqs": {"max_num_seqs": sch["max_num_seqs"]},
        "scheduler.max_model_len": {"max_model_len": sch["max_model_len"]},
        "scheduler.max_num_batched_tokens": {"max_num_batched_tokens": sch["max_num_batched_tokens"]},
        "scheduler.chunked_prefill": {"enable_chunked_prefill": sch.get("chunked_prefill", True)},
        "cache.prefix_caching": {"enable_prefix_caching": cache["prefix_caching"]},
        "cache.ssm_dtype": {"mamba_ssm_cache_dtype": cache["ssm_dtype"]},
        "cache.kv_cache_dtype": {"kv_cache_dtype": cache.get("kv_cache_dtype", "bfloat16")},
    }
    if "kv_cache_bytes" in mem:
        kwargs["kv_cache_memory_bytes"] = mem["kv_cache_bytes"]
        mapping["memory.kv_cache_bytes"] = {"kv_cache_memory_bytes": mem["kv_cache_bytes"]}
    else:
        total = get_profile(case["device"]).total_memory_bytes
        kwargs.update(gpu_memory_utilization=mem["gpu_memory_utilization"], device_memory_bytes=total)
        mapping["memory.gpu_memory_utilization"] = {"gpu_memory_utilization": mem["gpu_memory_utilization"],
                                                    "device_memory_bytes": total}
    async_scheduling = bool(sch.get("async_scheduling", get_profile(case["device"]).async_scheduling))
    mapping["scheduler.async_scheduling"] = {"async_scheduling": async_scheduling,
                                             "note": "the case's value, else the device profile's GPU default"}
    from engine_under_test.memory.specs import device_writes_gdn_prefill_checkpoints
    from engine_under_test.shapes import read_target_shape

    profile = get_profile(case["device"])
    checkpoints = device_writes_gdn_prefill_checkpoints(profile.device_capability, read_target_shape(Path(res["target_dir"])))
    mapping["device"] = {"gdn_prefill_checkpoints": checkpoints,
                         "note": f"the GDN prefill kernel of capability {list(profile.device_capability)} "
                                 "(engine_under_test.memory.specs.device_writes_gdn_prefill_checkpoints)"}
    cfg = EngineConfig(model=Path(res["target_dir"]), max_num_seqs=sch["max_num_seqs"], max_model_len=sch["max_model_len"],
                       max_num_batched_tokens=sch["max_num_batched_tokens"], speculative_config=spec,
                       enable_chunked_prefill=sch.get("chunked_prefill", True), async_scheduling=async_scheduling,
                       gdn_prefill_checkpoints=checkpoints, enable_prefix_caching=cache["prefix_caching"], mamba_ssm_cache_dtype=cache["ssm_dtype"],
                       kv_cache_dtype=cache.get("kv_cache_dtype", "bfloat16"), device="cuda", **kwargs)
    # NOTE: planned as on the case's device (every profile is a GPU): the planner then reserves the
    # CUDA context beside the pool, as the engine does when it runs there; planning allocates nothing
    mapping["device"]["planned_as"] = "cuda"
    return cfg, mapping


def _memory(plan: Any) -> dict[str, Any]:
    mp = plan.memory
    lay = mp.layout
    ps = mp.per_sequence
    return {
        "bound_bytes": mp.ledger.bound_bytes,
        "ledger_bytes": dict(mp.ledger.categories),
        "outside_bound": list(mp.ledger.outside_bound),
        "per_sequence": {
            "attention_kv_bytes": ps.attention_kv_bytes, "recurrent_state_bytes": ps.recurrent_state_bytes,
            "draft_kv_bytes": ps.draft_kv_bytes, "state_slots": ps.state_slots,
            "max_model_len_tokens": plan.cfg.max_model_len, "blocks_per_sequence": ps.num_blocks,
        },
        "pool": {
            "num_blocks": lay.num_blocks, "block_size_tokens": lay.block_size_tokens,
            "page_size_bytes": lay.page_size_bytes, "unified": True, "bytes_per_block": lay.bytes_per_block,
            "size_bytes": lay.total_bytes, "num_groups": len(lay.groups), "num_seats": mp.num_seats,
            "allocated": plan.pool.is_allocated,
        },
        "max_concurrency": float(mp.max_concurrency),
    }


def _requests(case: dict[str, Any], vocab: int) -> list[Any]:
    from engine_under_test.scheduler import Request

    wl = case["workload"]
    rng = random.Random(wl["seed"])
    return [Request(request_id=f"req-{i}", prompt_token_ids=[rng.randrange(2, vocab) for _ in range(wl["prompt_tokens"])],
                    max_tokens=wl["output_tokens"]) for i in range(wl["num_requests"])]


def plan(case: dict[str, Any]) -> dict[str, Any]:
    from dataclasses import asdict

    from engine_under_test.acceptance import AcceptanceModel
    from engine_under_test.budget import BudgetRefusal
    from engine_under_test.engine_plan import build_plan, simulate
    from engine_under_test.memory.planner import MemoryRefusal

    cid, dev = case["id"], case["device"]
    try:
        cfg, mapping = to_engine_config(case)
        eplan = build_plan(cfg)
    except (BudgetRefusal, MemoryRefusal, ValueError) as exc:
        obs = observation.failed(cid, ENGINE, engine_version(), "plan", dev, "refused", str(exc))
        obs["provenance"]["functions"] = list(FUNCTIONS)
        return obs
    obs = observation.new(cid, ENGINE, engine_version(), "plan", dev)
    obs["device"]["hardware"] = None
    obs["budget"] = eplan.budget.to_json()
    obs["memory"] = _memory(eplan)
    messages = [m for m in (eplan.budget.active_cap_reason, eplan.memory.seat_message) if m]
    obs["message"] = "; ".join(messages) or None
    prov = obs["provenance"]
    prov["functions"] = list(FUNCTIONS)
    prov["mapping"] = mapping
    prov["glue"] = [{"name": "workload", "description": "seeded prompts (random.Random(seed)), exactly output_tokens "
                     "per request; sampled and draft ids from random.Random(seed + 2)"}]
    try:
        acceptance = AcceptanceModel.from_spec(case["acceptance"], cfg.num_speculative_tokens, case["workload"]["seed"] + 1)
    except ValueError as exc:
        obs["trace"] = None
        obs["message"] = "; ".join(messages + [f"no trace: {exc}"])
        return obs
    try:
        steps = simulate(eplan, _requests(case, eplan.target.vocab_size), acceptance, case["workload"]["seed"] + 2)
    except ValueError as exc:   # a workload the engine refuses (a prompt longer than max_model_len)
        return observation.failed(cid, ENGINE, engine_version(), "plan", dev, "refused", str(exc))
    obs["trace"] = {"steps": [asdict(s) for s in steps]}
    return obs
