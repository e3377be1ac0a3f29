"""The vLLM plan adapter: runs inside the vLLM 0.33 oracle venv (see conformance.engines.engine_file).

`plan(case)` maps the case to vLLM's native knobs (vllm_config), resolves the config and the
budgets vLLM derives from it, plans the KV cache with vLLM's own planning functions (vllm_kv,
vllm_memory) and drives vLLM's real scheduler through the workload (vllm_trace). The device
profile (conformance.documents.devices) is emulated by the overrides vllm_config and vllm_platform list; each lands in
`provenance.overrides`.

Status:
- `ok` with budget, memory and trace.
- `refused` with vLLM's own message when vLLM rejects the config (EngineArgs /
  create_engine_config / KV planning raising ValueError, NotImplementedError or a pydantic
  ValidationError); `refusal.by` is "vllm" and `refusal.exception` the exception's type.
- `refused` with `refusal.by` = "adapter" for what plan mode cannot honestly do (a profile it
  cannot emulate; `memory.gpu_memory_utilization` on a config vLLM runs on Model Runner V1, whose
  weight loading is not emulated).
- `acceptance.mode: model`: the accepted count comes from a real draft's tokens. Budget and
  memory are still reported (status ok, trace null, `message` says why).
Anything else raises (the probe reports it as `error`).

Memory bound: `memory.kv_cache_bytes` is vLLM's `kv_cache_memory_bytes` (the worker hands it to the
planner unchanged). `memory.gpu_memory_utilization` is vLLM's knob of that name: the bytes the
planner receives are what vLLM's `Worker.determine_available_memory` derives on an emulated device
of the profile's memory (vllm_utilization: vLLM's request_memory and memory_profiling; the weights
from vLLM's model classes built on the meta device; the activation peak, other consumption, CUDA
graph estimate and init usage a GPU would measure are assumed figures, listed with their sources
in `provenance.assumed`, the derived figures in `provenance.utilization`). `memory.bound_bytes` is
then vLLM's requested memory, the ledger adds weights / workspace / activations / cuda_graphs beside
the pool, and `cuda_context` (the init usage, which vLLM does not charge to the requested memory) is
listed in `outside_bound`.
"""

from __future__ import annotations

import time
from typing import Any

from conformance.documents import observation
from conformance.documents.devices import get_profile

ENGINE = "vllm"



def engine_version() -> str:
    import vllm

    return vllm.__version__


def plan_setup() -> None:
    """Import vLLM once per process (the first import costs seconds)."""
    import vllm.engine.arg_utils  # noqa: F401
    import vllm.v1.core.sched.scheduler  # noqa: F401


def _refused(case: dict[str, Any], message: str, by: str, exc_type: str | None) -> dict[str, Any]:
    obs = observation.failed(case["id"], ENGINE, engine_version(), "plan", case["device"], "refused", message)
    obs["refusal"] = {"by": by, "exception": exc_type}
    obs["device"]["hardware"] = get_profile(case["device"]).hardware
    return obs


def _is_refusal(exc: BaseException) -> bool:
    """vLLM rejects configs with ValueError (pydantic's ValidationError is one) or NotImplementedError."""
    return isinstance(exc, (ValueError, NotImplementedError))


def plan(case: dict[str, Any]) -> dict[str, Any]:
    from conformance.adapters.vllm import (
        config as vllm_config,
        kv as vllm_kv,
        memory as vllm_memory,
        trace as vllm_trace,
        utilization as vllm_utilization,
    )

    profile = get_profile(case["device"])
    timing: dict[str, float] = {}
    t0 = time.perf_counter()
    from conformance.adapters.vllm import platform as vllm_platform

    try:
        built = vllm_config.build_config(case, profile)
    except vllm_platform.ProfileUnsupported as exc:
        return _refused(case, f"vllm plan adapter cannot emulate the {profile.name} profile: {exc}", "adapter", None)
    except Exception as exc:  # vLLM's own rejection of the config is data
        if not _is_refusal(exc):
            raise
        return _refused(case, f"{type(exc).__name__}: {exc}", "vllm", type(exc).__name__)
    timing["config_s"] = round(time.perf_counter() - t0, 3)
    vc = built.vllm_config
    obs = observation.new(case["id"], ENGINE, engine_version(), "plan", case["device"])
    obs["device"]["hardware"] = profile.hardware
    prov = obs["provenance"]
    prov["mapping"] = built.mapping
    prov["overrides"] = built.overrides
    prov["functions"] = list(vllm_config.FUNCTIONS) + list(vllm_platform.FUNCTIONS)
    prov["glue"] = [dict(g) for g in vllm_config.GLUE] + [dict(g) for g in vllm_platform.GLUE]
    if built.gdn_checkpoint_alignment is not None:
        prov["glue"].append(dict(vllm_platform.GDN_LAYERS_GLUE))
    with vllm_config.model_runner_env(built), vllm_platform.gdn_layers(built.gdn_checkpoint_alignment):
        obs["budget"] = vllm_config.budget(vc, profile)
        t1 = time.perf_counter()
        util = None
        try:
            if "gpu_memory_utilization" in case["memory"]:
                try:
                    util = vllm_utilization.available_kv_bytes(built, profile)
                except vllm_config.PlanModeLimit as exc:
                    return _refused(case, f"vllm plan adapter: memory.gpu_memory_utilization: {exc}", "adapter", None)
                timing["utilization_s"] = round(time.perf_counter() - t1, 3)
                t1 = time.perf_counter()
            kv = vllm_kv.plan_kv(built, case, util.available_bytes if util else None)
        except Exception as exc:
            if not _is_refusal(exc):
                raise
            refused = _refused(case, f"{type(exc).__name__}: {exc}", "vllm", type(exc).__name__)
            if "gpu_memory_utilization" in case["memory"]:   # vLLM refused on the emulated device's figures
                refused["provenance"].update(functions=list(vllm_utilization.FUNCTIONS),
                                             glue=[dict(g) for g in vllm_utilization.GLUE],
                                             assumed=[f.to_json() for f in vllm_utilization.assumed.FIGURES.values()])
            return refused
        timing["kv_plan_s"] = round(time.perf_counter() - t1, 3)
        prov["functions"] += list(kv.functions)
        prov["glue"] += [dict(g) for g in vllm_kv.GLUE] + [dict(g) for g in vllm_memory.GLUE]
        obs["memory"] = vllm_memory.memory(kv, vc)
        if util is not None:
            vllm_memory.add_utilization(obs["memory"], util)
            prov["functions"] += list(vllm_utilization.FUNCTIONS)
            prov["glue"] += [dict(g) for g in vllm_utilization.GLUE]
            prov["assumed"] = [f.to_json() for f in util.figures]
            prov["utilization"] = util.to_json()
        if case["acceptance"]["mode"] == "model":
            obs["message"] = ("vllm plan adapter: acceptance.mode model needs a real draft's tokens; "
                              "plan mode reports budget and memory, no trace")
        else:
            t2 = time.perf_counter()
            obs["trace"] = {"steps": vllm_trace.run_trace(vc, kv.scheduler_kv_cache_config, case),
                            "scheduler_cls": vc.scheduler_config.get_scheduler_cls().__qualname__,
                            "scheduling": "async" if vc.scheduler_config.async_scheduling else "sync"}
            timing["trace_s"] = round(time.perf_counter() - t2, 3)
            prov["functions"] += list(vllm_trace.functions(vc))
            prov["glue"] += [dict(g) for g in vllm_trace.glue(vc)]
            if case["acceptance"]["mode"] == "synthetic":
                prov["glue"].append({"name": "synthetic sampler", "description": (
                    "Bernoulli draws with random.Random(workload.seed + 1) against vLLM's conditional "
                    "rates (unconditional_to_conditional_rates of speculative_config.synthetic_acceptance_rates)")})
    obs["timing"] = timing
    return obs
