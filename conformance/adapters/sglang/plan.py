"""SGLang 0.5.23 plan adapter: budgets, pool sizing and an admission trace from SGLang's own code.

Runs inside the SGLang oracle venv (`python -m conformance.harness.probe --adapter conformance.adapters.sglang.plan`).

What SGLang has and has not, as the observation reports it:

- SGLang has no single per-step token budget like vLLM's max_num_batched_tokens. A prefill step is
  capped by `chunked_prefill_size` and by `max_prefill_tokens` (the PrefillAdder's two budgets); a
  decode step verifies running_bs x `speculative_num_draft_tokens` tokens with no token cap. So
  `budget.max_num_batched_tokens`, `max_num_scheduled_tokens`, `drafting_slots_per_request` and
  `lookahead_tokens` are null, and SGLang's own fields are extra budget keys: chunked_prefill_size,
  max_prefill_tokens, num_draft_tokens_per_step (per request per verify step),
  decode_reserved_tokens_per_request (what `check_decode_mem` reserves per request).
- `budget.max_active_seqs` is max_running_requests after every cap SGLang applies while sizing
  (KV capacity, the mamba state cache); when it is below max_num_seqs, `message` carries
  SGLang's own log line.
- Memory: the case's kv_cache_bytes stands in for the profiler's measured KV budget (see
  `sglang_sizing`). The gpu_memory_utilization form is SGLang's `mem_fraction_static`: SGLang's own
  `_resolve_memory_pool_config` sizes the pools from the free memory it would find on the profile's
  device (`sglang_utilization`: the weights from SGLang's model classes built on the meta device, the
  init usage an assumed figure, listed with its source in `provenance.assumed`, SGLang's figures in
  `provenance.utilization`); the ledger then adds `weights`, and `cuda_context` (which SGLang's
  fraction, applied to the memory free before the weights load, does not cover) is listed in
  `outside_bound`. SGLang's default pools are separate allocations (target KV, draft KV,
  mamba state + verify scratch), all carved from the one budget; `req_to_token` is allocated beside
  it and listed in `outside_bound`.

Trace: `sglang_trace.run_trace` drives SGLang's own admission, decode and result-processing pieces
(PrefillAdder, check_decode_mem, retract_decode, spec_prepare_for_decode, SchedulerBatchResultProcessor,
release_kv_cache) through the workload on pools of the sizes SGLang derived, their KV and state storage
on torch's meta device and their index bookkeeping on the CPU (`meta_storage`; the bytes of each
in provenance.trace_pools, the pools' counters after the loop in provenance.trace_end_state), so the
27B shapes trace on their full pools in host RAM that holds none of them. Every SGLang algorithm this
adapter maps (DFLASH, EAGLE3, NEXTN, STANDALONE, NGRAM) and the radix cache with the mamba extra buffer
are traced. No trace (null, `message` and provenance.trace say why) for acceptance mode `model`.

Statefulness: SGLang's sizing writes process-wide config (publish, config-bag overrides). Each
plan builds a fresh ServerArgs and re-publishes it before sizing (last-publish-wins), and the
device profile is installed and restored around each plan, so one process may plan many cases.
"""

from __future__ import annotations

from typing import Any

from conformance.documents import observation
from conformance.adapters.sglang import (
    knobs as sglang_knobs,
    platform as sglang_platform,
    sizing as sglang_sizing,
    trace as sglang_trace,
    utilization as sglang_utilization,
)
from conformance.documents.devices import bound_bytes, get_profile

ENGINE = "sglang"
MODE = "plan"


def engine_version() -> str:
    import sglang

    return sglang.__version__


def plan_setup() -> None:
    import sglang.srt.server_args  # noqa: F401  (the ~6 s import, once per process)


def _refused(case: dict[str, Any], message: str, **extra: Any) -> dict[str, Any]:
    return observation.failed(case["id"], ENGINE, engine_version(), MODE, case["device"], "refused", message, **extra)


def _resolve(kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    from sglang.srt.server_args import ServerArgs

    server_args = ServerArgs(**kwargs)
    server_args.resolve_once()
    return server_args, server_args.resolved_dict()


def _req_to_token_bytes(sizing: sglang_sizing.Sizing) -> int:
    """Bytes of SGLang's request->token table (built for real on CPU: it is small)."""
    from sglang.srt.mem_cache.allocation_sizing import get_req_to_token_extra_context_len
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

    pool = ReqToTokenPool(size=sizing.max_running_requests,
                          max_context_len=sizing.kvc.model_config.context_len + get_req_to_token_extra_context_len(),
                          device="cpu", enable_memory_saver=False)
    return int(pool.req_to_token.nbytes)


def _budget(case: dict[str, Any], resolved: dict[str, Any], sizing: sglang_sizing.Sizing) -> dict[str, Any]:
    chunked = resolved["chunked_prefill_size"]
    draft_tokens = resolved.get("speculative_num_draft_tokens")
    return {
        "max_num_batched_tokens": None,
        "max_num_scheduled_tokens": None,
        "drafting_slots_per_request": None,
        "lookahead_tokens": None,
        "max_num_seqs": int(case["scheduler"]["max_num_seqs"]),
        "max_active_seqs": sizing.max_running_requests,
        "chunked_prefill_size": int(chunked) if chunked and chunked > 0 else None,
        "max_prefill_tokens": int(resolved["max_prefill_tokens"]),
        "num_draft_tokens_per_step": int(draft_tokens) if draft_tokens else None,
        "speculative_num_steps": resolved.get("speculative_num_steps"),
        "speculative_eagle_topk": resolved.get("speculative_eagle_topk"),
        "decode_reserved_tokens_per_request": _decode_reserve_tokens(resolved),
    }


def _decode_reserve_tokens(resolved: dict[str, Any]) -> int | None:
    """KV tokens check_decode_mem reserves per request per decode step (SGLang's own function)."""
    if not resolved.get("speculative_algorithm"):
        return None
    from sglang.srt.mem_cache.allocation_sizing import get_alloc_reserve_per_decode

    return int(get_alloc_reserve_per_decode())


def _memory(case: dict[str, Any], sizing: sglang_sizing.Sizing, req_to_token_bytes: int) -> dict[str, Any]:
    tokens = sizing.max_total_num_tokens
    ledger = {
        "attention_kv": tokens * sizing.target_kv_bytes_per_token,
        "recurrent_state": sizing.recurrent_state_bytes if sizing.is_hybrid else 0,
        "draft_kv": tokens * sizing.draft_kv_bytes_per_token,
        "intermediate_state": sizing.intermediate_state_bytes if sizing.is_hybrid else 0,
        "req_to_token": req_to_token_bytes,
    }
    context_len = int(case["scheduler"]["max_model_len"])
    per_seq = {
        "attention_kv_bytes": context_len * sizing.target_kv_bytes_per_token,
        "recurrent_state_bytes": (sizing.state_slots_per_request * sizing.mamba_state_bytes_per_slot
                                  if sizing.is_hybrid else 0),
        "draft_kv_bytes": context_len * sizing.draft_kv_bytes_per_token,
        "state_slots": sizing.state_slots_per_request if sizing.is_hybrid else None,
        "mamba_state_bytes_per_slot": sizing.mamba_state_bytes_per_slot,
        "kv_bytes_per_token": sizing.kv_bytes_per_token,
        "target_kv_bytes_per_token": sizing.target_kv_bytes_per_token,
        "draft_kv_bytes_per_token": sizing.draft_kv_bytes_per_token,
    }
    page = sizing.page_size_tokens
    return {
        "bound_bytes": bound_bytes(case),
        "ledger_bytes": ledger,
        "outside_bound": ["req_to_token"],
        "per_sequence": per_seq,
        "pool": {
            "num_blocks": tokens // page,
            "block_size_tokens": page,
            "page_size_bytes": page * sizing.kv_bytes_per_token,
            "unified": False,
            "max_total_num_tokens": tokens,
            "max_mamba_cache_size": sizing.max_mamba_cache_size,
        },
        "max_concurrency": sizing.max_running_requests,
    }


def _add_utilization(memory: dict[str, Any], util: sglang_utilization.Utilization) -> None:
    """Weights beside the pools; the init usage outside what mem_fraction_static covers."""
    memory["ledger_bytes"]["weights"] = util.weights.total_bytes
    memory["ledger_bytes"]["cuda_context"] = util.init_used_bytes
    memory["outside_bound"] = sorted(set(memory["outside_bound"]) | {"cuda_context"})


def plan(case: dict[str, Any]) -> dict[str, Any]:
    profile = get_profile(case["device"])
    obs = observation.new(case["id"], ENGINE, engine_version(), MODE, case["device"])
    obs["device"]["hardware"] = profile.hardware
    try:
        kwargs, mapping = sglang_knobs.server_args_kwargs(case, sglang_platform.DEVICE)
    except sglang_knobs.Unsupported as exc:
        return _refused(case, str(exc))
    budget_bytes = bound_bytes(case)
    fraction = case["memory"].get("gpu_memory_utilization")
    if fraction is None:
        mapping["memory.kv_cache_bytes"] = {"KV budget bytes": budget_bytes, "note": (
            "replaces the profiler's measured budget (free memory after weights minus slack)")}
    else:
        kwargs["mem_fraction_static"] = fraction
        mapping["memory.gpu_memory_utilization"] = {"mem_fraction_static": fraction, "note": (
            "SGLang's static fraction (weights + pools) of the memory free before the weights load")}
    try:
        sglang_platform.platform_facts(profile)
    except sglang_platform.ProfileUnsupported as exc:
        return _refused(case, f"sglang plan adapter cannot emulate the {profile.name} profile: {exc}")
    with sglang_platform.device_profile(profile) as overrides:
        try:
            server_args, resolved = _resolve(kwargs)
        except (ValueError, AssertionError) as exc:
            return _refused(case, f"{type(exc).__name__}: {exc}", provenance={
                "functions": ["sglang.srt.server_args.ServerArgs.resolve_once"], "overrides": overrides,
                "glue": [], "mapping": mapping})
        util = None
        try:
            if fraction is None:
                sizing = sglang_sizing.size_pools(server_args, budget_bytes, sglang_platform.DEVICE)
            else:
                sizing, util = sglang_utilization.size_pools_from_fraction(server_args, profile, sglang_platform.DEVICE)
        except (ValueError, RuntimeError) as exc:
            provenance = {"functions": list(sglang_sizing.FUNCTIONS), "overrides": overrides, "glue": [],
                          "mapping": mapping}
            if fraction is not None:   # SGLang refused on the emulated device's figures
                provenance["functions"] += list(sglang_utilization.FUNCTIONS)
                provenance["glue"] = [dict(g) for g in sglang_utilization.GLUE]
                provenance["assumed"] = [f.to_json() for f in sglang_utilization.assumed.FIGURES.values()]
                if isinstance(exc, sglang_utilization.Refused):
                    provenance["utilization"] = exc.figures
            name = exc.exception_type if isinstance(exc, sglang_utilization.Refused) else type(exc).__name__
            return _refused(case, f"{name}: {exc}", provenance=provenance)
        obs["budget"] = _budget(case, resolved, sizing)
        obs["memory"] = _memory(case, sizing, _req_to_token_bytes(sizing))
        if util is not None:
            _add_utilization(obs["memory"], util)
        trace_note = _trace(obs, server_args, sizing, case)
    notes = []
    if sizing.max_running_requests < obs["budget"]["max_num_seqs"]:
        caps = [line for line in sizing.log_lines if line.startswith("max_running_requests")]
        notes.append("\n".join(caps) or (
            f"SGLang resolved max_running_requests={sizing.max_running_requests} (logged no reason)"))
    if obs["trace"] is None:
        notes.append(f"sglang plan adapter: no trace: {trace_note['reason']}")
    obs["message"] = "\n".join(notes) or None
    obs["provenance"] = {
        "functions": list(sglang_sizing.FUNCTIONS),
        "overrides": overrides,
        "glue": [{"name": "conformance.adapters.sglang.sizing.size_pools",
                  "description": "calls the profiler's sizing steps on the case's byte budget in place of "
                                 "measured free GPU memory; ledger bytes = SGLang's token count x its cell sizes, "
                                 "intermediate_state = budget taken by _handle_max_mamba_cache minus the state slots"}],
        "mapping": mapping,
        "resolved": {k: resolved.get(k) for k in (
            "attention_backend", "speculative_draft_attention_backend", "mem_fraction_static",
            "disable_overlap_schedule", "mamba_radix_cache_strategy", "page_size", "linear_attn_backend")},
        "log_warnings": sizing.log_lines,
    }
    if util is not None:
        obs["provenance"]["functions"] += list(sglang_utilization.FUNCTIONS)
        obs["provenance"]["glue"] += [dict(g) for g in sglang_utilization.GLUE]
        obs["provenance"]["assumed"] = [f.to_json() for f in util.figures]
        obs["provenance"]["utilization"] = util.to_json()
    obs["provenance"].update(trace_note["provenance"])
    if obs["trace"] is not None:
        obs["provenance"]["functions"] += list(sglang_trace.FUNCTIONS)
        obs["provenance"]["glue"] += [dict(g) for g in sglang_trace.GLUE]
        obs["provenance"]["overrides"] += [dict(o) for o in sglang_trace.OVERRIDES]
    return obs


def _trace(obs: dict[str, Any], server_args: Any, sizing: sglang_sizing.Sizing, case: dict[str, Any]) -> dict[str, Any]:
    """Fill obs["trace"] (or leave it None); returns the reason / provenance to record."""
    try:
        steps, storage, end_state = sglang_trace.run_trace(server_args, sizing, case)
    except ValueError as exc:
        return {"reason": str(exc), "provenance": {"trace": f"not produced: {exc}"}}
    from sglang.srt.runtime_context import get_schedule

    obs["trace"] = {"steps": steps, "loop": "event_loop_normal" if get_schedule().disable_overlap_schedule
                    else "event_loop_overlap"}
    return {"reason": None, "provenance": {"trace_pools": storage, "trace_end_state": end_state}}
