"""Case -> vLLM 0.33 `VllmConfig`, with the device profile applied; the budgets vLLM derives.

Runs inside the vLLM oracle venv (imports vllm lazily so the module itself imports anywhere).

Contract: `build_config(case)` returns a `BuiltConfig` whose `vllm_config` is what
`EngineArgs(...).create_engine_config()` produced for the case's native knobs, then adjusted the
way a GPU worker of the case's device profile would adjust it (each adjustment listed in
`overrides`); `mapping` records every case field -> native knob. A config vLLM rejects raises
whatever vLLM raised (the caller turns it into a `refused` observation).

Device-profile choices (all recorded in provenance.overrides):
- Model runner: on a GPU with Triton vLLM 0.33 picks Model Runner V2 unless the case uses a
  feature V2 lacks (`VllmConfig._get_v2_model_runner_unsupported_features`); on this CPU it picks
  V1 (no Triton). We set `VLLM_USE_V2_MODEL_RUNNER` for the duration of config creation to what
  the GPU would pick: first V2, and V1 if vLLM answers "Model Runner V2 does not yet support".
- Device choices (conformance.adapters.vllm.platform): the attention backends of the target and
  the draft and the GDN prefill kernel are chosen by vLLM's own selection code under a CUDA
  platform answering the profile's facts, never named here.
- Attention block size: the GPU worker calls `Platform.update_block_size_for_backend` after
  loading the model; we call the base `Platform` implementation with the selected backends
  standing for the non-SSM layers, instead of CpuPlatform's CPU sizes. Where the GDN layers
  export align-mode prefill checkpoints (FlashInfer GDN prefill: SM90, or SM10x/SM12x with
  head_k_dim 128 on CUDA 13), their checkpoint alignment enters vLLM's lcm as it does on the GPU.
- Async scheduling: CpuPlatform forces it off. The trace follows the profile's GPU default
  (`async_scheduling` true: vLLM's AsyncScheduler driven as EngineCore runs it) unless the case
  sets `scheduler.async_scheduling`; the budget reports the GPU default
  (`async_scheduling_gpu_default`).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Any, Iterator

from conformance.documents.devices import DeviceProfile
from conformance.engines.speculative_config import speculative_config

V2_UNSUPPORTED_PREFIX = "Model Runner V2 does not yet support"

FUNCTIONS = (
    "vllm.engine.arg_utils.EngineArgs.create_engine_config",
    "vllm.config.VllmConfig._set_max_num_scheduled_tokens",
    "vllm.config.VllmConfig.num_lookahead_tokens",
    "vllm.config.SpeculativeConfig.max_num_new_slots_for_drafting",
    "vllm.config.VllmConfig.use_v2_model_runner",
    "vllm.platforms.interface.Platform.update_block_size_for_backend",
    "vllm.platforms.interface.Platform._align_hybrid_block_size",
    "vllm.model_executor.layers.mamba.abstract.get_mamba_prefill_checkpoint_alignment",
)

GLUE = (
    {"name": "ProfileAttentionPlatform", "description": "subclass of the base vllm Platform whose "
     "_find_non_ssm_backends returns the attention backends vLLM selected for the profile (target, then "
     "draft), so update_block_size_for_backend runs without a loaded model"},
)

KV_CACHE_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "fp8": "fp8"}


class PlanModeLimit(RuntimeError):
    """Something this adapter does not emulate (never a vLLM refusal: the probe reports it as error)."""


@dataclass
class BuiltConfig:
    vllm_config: Any
    mapping: dict[str, Any]
    use_v2_model_runner_env: str | None    # the VLLM_USE_V2_MODEL_RUNNER value to plan under
    overrides: list[dict[str, Any]] = field(default_factory=list)
    attention_backend: Any = None
    draft_attention_backend: Any = None
    gdn_checkpoint_alignment: int | None = None   # tokens; None: the GDN layers export no prefill checkpoints
    device_choices: Any = None


def model_runner_env(built: BuiltConfig) -> contextlib.AbstractContextManager:
    """`vllm_config.use_v2_model_runner` reads the environment on every access: keep the
    chosen value set while the scheduler is built and driven."""
    return _env("VLLM_USE_V2_MODEL_RUNNER", built.use_v2_model_runner_env)


def memory_knobs(case: dict[str, Any]) -> dict[str, Any]:
    """The case's memory bound as vLLM's knob: kv_cache_memory_bytes, or gpu_memory_utilization."""
    mem = case["memory"]
    if "kv_cache_bytes" in mem:
        return {"kv_cache_memory_bytes": mem["kv_cache_bytes"]}
    return {"gpu_memory_utilization": mem["gpu_memory_utilization"]}


def engine_args_kwargs(case: dict[str, Any]) -> dict[str, Any]:
    """The native EngineArgs knobs for a case."""
    sched, cache = case["scheduler"], case["cache"]
    return {
        "model": case["resolved"]["target_dir"],
        "skip_tokenizer_init": True,
        "load_format": "dummy",
        "enforce_eager": True,
        "seed": case["workload"]["seed"],
        "max_num_seqs": sched["max_num_seqs"],
        "max_model_len": sched["max_model_len"],
        "max_num_batched_tokens": sched["max_num_batched_tokens"],
        "enable_chunked_prefill": sched["chunked_prefill"],
        "enable_prefix_caching": cache["prefix_caching"],
        "mamba_ssm_cache_dtype": cache["ssm_dtype"],
        "kv_cache_dtype": KV_CACHE_DTYPES[cache["kv_cache_dtype"]],
        **memory_knobs(case),
        "speculative_config": speculative_config(case),
    }


def case_mapping(case: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    spec = kwargs["speculative_config"]
    mapping = {
        "target": {"knob": "model", "value": kwargs["model"]},
        "speculative.method": {"knob": "speculative_config.method", "value": spec["method"]},
        "speculative.num_speculative_tokens": {"knob": "speculative_config.num_speculative_tokens",
                                               "value": spec["num_speculative_tokens"]},
        "scheduler.max_num_seqs": {"knob": "max_num_seqs", "value": kwargs["max_num_seqs"]},
        "scheduler.max_model_len": {"knob": "max_model_len", "value": kwargs["max_model_len"]},
        "scheduler.max_num_batched_tokens": {"knob": "max_num_batched_tokens", "value": kwargs["max_num_batched_tokens"]},
        "scheduler.chunked_prefill": {"knob": "enable_chunked_prefill", "value": kwargs["enable_chunked_prefill"]},
        "cache.prefix_caching": {"knob": "enable_prefix_caching", "value": kwargs["enable_prefix_caching"]},
        "cache.ssm_dtype": {"knob": "mamba_ssm_cache_dtype", "value": kwargs["mamba_ssm_cache_dtype"]},
        "cache.kv_cache_dtype": {"knob": "kv_cache_dtype", "value": kwargs["kv_cache_dtype"]},
        "workload.seed": {"knob": "seed", "value": kwargs["seed"]},
    }
    if "kv_cache_memory_bytes" in kwargs:
        mapping["memory.kv_cache_bytes"] = {"knob": "kv_cache_memory_bytes", "value": kwargs["kv_cache_memory_bytes"]}
    else:
        mapping["memory.gpu_memory_utilization"] = {"knob": "gpu_memory_utilization",
                                                    "value": kwargs["gpu_memory_utilization"]}
    if "parallel_drafting" in spec:
        mapping["speculative.method"]["parallel_drafting"] = True
    if "model" in spec:
        mapping["draft"] = {"knob": "speculative_config.model", "value": spec["model"]}
    for case_key, knob in (("acceptance.mean_acceptance_length", "synthetic_acceptance_length"),
                           ("acceptance.acceptance_rates", "synthetic_acceptance_rates")):
        if knob in spec:
            mapping[case_key] = {"knob": f"speculative_config.{knob}", "value": spec[knob],
                                 "with": {"speculative_config.rejection_sample_method": "synthetic"}}
    for key in ("prompt_lookup_max", "prompt_lookup_min"):
        if key in spec:
            mapping[f"speculative.ngram_{key}"] = {"knob": f"speculative_config.{key}", "value": spec[key]}
    return mapping


@contextlib.contextmanager
def _env(name: str, value: str | None) -> Iterator[None]:
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def _create(kwargs: dict[str, Any], use_v2: str | None) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    with _env("VLLM_USE_V2_MODEL_RUNNER", use_v2):
        return EngineArgs(**kwargs).create_engine_config()


def _gpu_platform(backend_classes: list) -> type:
    """The base Platform with the backends vLLM selected for the profile standing for the non-SSM layers."""
    from vllm.platforms.interface import Platform

    class ProfileAttentionPlatform(Platform):
        @classmethod
        def _find_non_ssm_backends(cls, vllm_config: Any) -> list:
            return list(backend_classes)

    return ProfileAttentionPlatform


def build_config(case: dict[str, Any], profile: DeviceProfile) -> BuiltConfig:
    from conformance.adapters.vllm import platform as vllm_platform

    kwargs = engine_args_kwargs(case)
    overrides: list[dict[str, Any]] = []
    mode = scheduling_mode(case, profile)
    async_refused: str | None = None
    if mode == "async":
        # vLLM's own check decides: with async_scheduling=True VllmConfig.__post_init__ raises for an
        # incompatible config (where the GPU default would silently fall back to sync).
        kwargs["async_scheduling"] = True
    while True:
        try:
            try:
                vc = _create(kwargs, "1")
                runner, runner_env = "v2", "1"
            except ValueError as exc:
                if V2_UNSUPPORTED_PREFIX not in str(exc):
                    raise
                vc = _create(kwargs, "0")
                runner, runner_env = "v1", "0"
                v2_reason = str(exc)
            break
        except ValueError as exc:
            if not kwargs.get("async_scheduling") or "async scheduling" not in str(exc).lower():
                raise
            async_refused = str(exc)
            kwargs["async_scheduling"] = False
            mode = "sync"
    overrides.append({
        "name": "VLLM_USE_V2_MODEL_RUNNER", "value": runner == "v2",
        "reason": ("the GPU default: Model Runner V2 (needs Triton, which this CPU host lacks)"
                   if runner == "v2" else f"the GPU default falls back to V1: {v2_reason}"),
    })

    with _env("VLLM_USE_V2_MODEL_RUNNER", runner_env):
        choices = vllm_platform.choose(vc, profile, has_gdn_layers=bool(vc.model_config.is_hybrid))
        checkpoint_alignment = vllm_platform.gdn_checkpoint_alignment(vc, choices)
        overrides.append({
            "name": "attention_backend", "value": choices.to_json(),
            "reason": (f"chosen by vLLM's own selection code for {profile.hardware} "
                       f"(capability {list(profile.device_capability)}; CUDA runtime of the oracle venv's torch): "
                       "get_attn_backend under ProfileCudaPlatform for the target and the draft, "
                       "_resolve_gdn_prefill_backend for the GDN layers"),
        })
        with vllm_platform.gdn_layers(checkpoint_alignment):
            _align_blocks(vc, profile, choices, checkpoint_alignment, overrides)
    overrides.append({
        "name": "mamba_ssm_cache_dtype", "value": kwargs["mamba_ssm_cache_dtype"],
        "reason": "passed explicitly from cache.ssm_dtype ('auto' resolves per host on CPU)",
    })
    async_scheduling = mode == "async"
    reason = f"CpuPlatform forces it off; the {profile.name} profile's GPU default is {profile.async_scheduling}"
    if "async_scheduling" in case["scheduler"]:
        reason += f", the case asks for {case['scheduler']['async_scheduling']} (scheduler.async_scheduling)"
    if async_refused:
        reason += f"; vLLM refuses async scheduling for this config ({async_refused}), as its GPU default would"
    reason += ("; the trace is driven as EngineCore.step_with_batch_queue runs an async engine "
               "(AsyncScheduler, outputs one step behind)" if async_scheduling else
               "; the trace is the synchronous engine's (EngineCore.step + post_step)")
    overrides.append({"name": "scheduler_config.async_scheduling", "value": async_scheduling, "reason": reason})
    vc.scheduler_config.async_scheduling = async_scheduling
    return BuiltConfig(vllm_config=vc, mapping=case_mapping(case, kwargs), use_v2_model_runner_env=runner_env,
                       overrides=overrides, attention_backend=choices.attention_backend,
                       draft_attention_backend=choices.draft_attention_backend,
                       gdn_checkpoint_alignment=checkpoint_alignment, device_choices=choices)


def scheduling_mode(case: dict[str, Any], profile: DeviceProfile) -> str:
    """'async' or 'sync': the case's scheduler.async_scheduling, else the profile's GPU default."""
    wanted = case["scheduler"].get("async_scheduling", profile.async_scheduling)
    return "async" if wanted else "sync"


def _align_blocks(vc: Any, profile: DeviceProfile, choices: Any, checkpoint_alignment: int | None,
                  overrides: list[dict[str, Any]]) -> None:
    """What the GPU worker does after load_model: Platform.update_block_size_for_backend."""
    backends = [choices.attention_backend]
    if choices.draft_attention_backend is not None and choices.draft_attention_backend not in backends:
        backends.append(choices.draft_attention_backend)
    names = "/".join(b.get_name() for b in backends)
    cache = vc.cache_config
    before = (cache.block_size, cache.mamba_block_size, cache.mamba_page_size_padded)
    _gpu_platform(backends).update_block_size_for_backend(vc)
    overrides.append({
        "name": "cache_config.block_size", "value": cache.block_size,
        "reason": (f"GPU worker's block-size alignment: base Platform.update_block_size_for_backend "
                   f"(_preferred_block_size_for_backends + _align_hybrid_block_size) with the backends vLLM "
                   f"selected for {profile.name} ({names}) instead of CpuPlatform's CPU attention sizes; "
                   f"before {before[0]}, after {cache.block_size}"),
    })
    if not vc.model_config.is_hybrid:
        return
    overrides.append({
        "name": "cache_config.mamba_block_size/mamba_page_size_padded",
        "value": [cache.mamba_block_size, cache.mamba_page_size_padded],
        "reason": f"set by the same alignment (before {list(before[1:])})",
    })
    gdn = choices.gdn_prefill_backend
    if checkpoint_alignment is not None:
        reason = (f"GDN prefill backend {gdn!r} on {profile.name} in align mode: every GDN layer reports "
                  f"get_prefill_checkpoint_alignment() = {checkpoint_alignment} (FLASHINFER_GDN_CHECKPOINT_ALIGNMENT), "
                  "which enters the block-size lcm, and its MambaSpec gets num_prefill_checkpoint_blocks=1 and "
                  "prefill_checkpoint_alignment = get_mamba_prefill_checkpoint_grid (one checkpoint block per request)")
    else:
        reason = (f"GDN prefill backend {gdn!r}, mamba_cache_mode {cache.mamba_cache_mode!r}: no prefill checkpoints "
                  "(only FlashInfer's GDN prefill in align mode exports them)")
    overrides.append({"name": "gdn_prefill_checkpoint_alignment_tokens", "value": checkpoint_alignment,
                      "reason": reason})


def budget(vc: Any, profile: DeviceProfile) -> dict[str, Any]:
    """The per-step budgets straight off vLLM's resolved config."""
    sc = vc.scheduler_config
    spec = vc.speculative_config
    max_num_scheduled = sc.max_num_scheduled_tokens if sc.max_num_scheduled_tokens is not None else sc.max_num_batched_tokens
    max_active = sc.max_num_active_seqs if sc.max_num_active_seqs is not None else sc.max_num_seqs
    return {
        "max_num_batched_tokens": sc.max_num_batched_tokens,
        "max_num_scheduled_tokens": max_num_scheduled,
        "drafting_slots_per_request": spec.max_num_new_slots_for_drafting if spec is not None else 0,
        "lookahead_tokens": vc.num_lookahead_tokens,
        "max_num_seqs": sc.max_num_seqs,
        "max_active_seqs": max_active,
        "num_speculative_tokens": vc.num_speculative_tokens,
        "parallel_drafting": bool(spec.parallel_drafting) if spec is not None else False,
        "speculative_method": spec.method if spec is not None else None,
        "model_runner": "v2" if vc.use_v2_model_runner else "v1",
        "chunked_prefill": bool(sc.enable_chunked_prefill),
        "prefix_caching": bool(vc.cache_config.enable_prefix_caching),
        "mamba_cache_mode": vc.cache_config.mamba_cache_mode,
        "async_scheduling_gpu_default": profile.async_scheduling,
    }
