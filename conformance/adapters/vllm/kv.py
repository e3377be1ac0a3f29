"""vLLM 0.33 KV/state planning for one case, as `EngineCore._initialize_kv_caches` runs it.

Contract: `plan_kv(built, case, available_bytes)` returns a `KVPlan`: the per-layer specs, vLLM's
worker and scheduler `KVCacheConfig`s for the bytes the worker hands the planner (the case's byte
bound, or what `determine_available_memory` derived from gpu_memory_utilization), and the max
concurrency vLLM derives.

Glue (named in provenance): the per-layer spec dict is built here rather than by a loaded model's
`get_kv_cache_spec()` (building real modules of a 27B shape on CPU costs its weights in RAM). Each
spec follows the code path of the module it stands for, with vLLM's own shape/dtype functions:

    target full attention  Attention.get_kv_cache_spec -> FullAttentionSpec, then
                           customize_attention_spec(<backend vLLM selected for the device>, spec)
    target GDN layer       MambaBase.get_kv_cache_spec -> MambaSpec(shapes/dtypes from the model
                           class's get_mamba_state_shape/dtype_from_config, GDN_ATTN,
                           num_speculative_blocks=k; with FlashInfer GDN prefill in align
                           mode GatedDeltaNetAttention.get_kv_cache_spec adds
                           num_prefill_checkpoint_blocks=1 and the checkpoint grid)
    draft attention        the same with the draft's selected backend, is_draft=True
                           (GPUModelRunner.get_kv_cache_spec for draft layers)

Layer names follow vLLM's prefixes (`model.layers.<i>...`; draft layers continue numbering after
the target's, as `start_layer_id=target_layer_num` does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conformance.adapters.vllm.config import BuiltConfig, PlanModeLimit

FUNCTIONS = (
    "vllm.v1.core.single_type_kv_cache_manager.register_all_kvcache_specs",
    "vllm.v1.attention.backends.utils.get_supported_kv_cache_layouts",
    "vllm.v1.attention.backends.utils.resolve_kv_cache_layout",
    "vllm.v1.core.kv_cache_planning.get_global_kv_cache_groups",
    "vllm.v1.core.kv_cache_planning.get_kv_cache_configs",
    "vllm.v1.core.kv_cache_utils.generate_scheduler_kv_cache_config",
    "vllm.v1.core.kv_cache_utils.get_max_concurrency_for_kv_cache_config",
    "vllm.v1.worker.utils.customize_attention_spec",
    "vllm.utils.torch_utils.kv_cache_dtype_str_to_dtype",
    "vllm.v1.core.kv_cache_utils.update_kv_cache_capacity",
    "vllm.config.VllmConfig.validate_block_size",
    "vllm.v1.core.kv_cache_utils.resolve_kv_cache_block_sizes",
    "vllm.v1.core.kv_cache_utils.resolve_cache_hit_alignment_tokens",
)

GLUE = (
    {"name": "hand-built KV specs", "description": "per-layer KVCacheSpec dict built from the configs "
     "as Attention.get_kv_cache_spec / MambaBase.get_kv_cache_spec / GPUModelRunner.get_kv_cache_spec "
     "would (no model is built): FullAttentionSpec + customize_attention_spec(the backend vLLM selected for the "
     "device) for target and draft attention (draft: is_draft=True), MambaSpec with the model class's "
     "get_mamba_state_shape_from_config / get_mamba_state_dtype_from_config for GDN layers"},
)


@dataclass
class KVPlan:
    specs: dict[str, Any]              # layer name -> KVCacheSpec
    categories: dict[str, str]         # layer name -> attention_kv | recurrent_state | draft_kv
    available_bytes: int
    kv_cache_config: Any               # the worker's KVCacheConfig
    scheduler_kv_cache_config: Any
    max_concurrency: float
    functions: tuple[str, ...]


def _attention_spec(vc: Any, model_config: Any, backend_cls: Any, is_draft: bool) -> Any:
    from dataclasses import replace

    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype
    from vllm.v1.kv_cache_interface import FullAttentionSpec, get_kv_quant_mode
    from vllm.v1.worker.utils import customize_attention_spec

    cache = vc.cache_config
    head_size = model_config.get_head_size()
    spec = FullAttentionSpec(
        block_size=cache.block_size,
        num_kv_heads=model_config.get_num_kv_heads(vc.parallel_config),
        head_size=head_size,
        head_size_v=head_size,
        dtype=kv_cache_dtype_str_to_dtype(cache.cache_dtype, vc.model_config),
        kv_quant_mode=get_kv_quant_mode(cache.cache_dtype),
    )
    spec = customize_attention_spec(backend_cls, spec)
    return replace(spec, is_draft=True) if is_draft else spec


def _mamba_spec(vc: Any, checkpoint_alignment: int | None) -> Any:
    from dataclasses import replace

    from vllm.model_executor.layers.mamba import abstract
    from vllm.model_executor.models import ModelRegistry
    from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
    from vllm.v1.kv_cache_interface import MambaSpec

    model_cls, _ = ModelRegistry.resolve_model_cls(vc.model_config.architecture, model_config=vc.model_config)
    cache = vc.cache_config
    spec = MambaSpec(
        shapes=tuple(model_cls.get_mamba_state_shape_from_config(vc)),
        dtypes=tuple(model_cls.get_mamba_state_dtype_from_config(vc)),
        block_size=cache.mamba_block_size,
        page_size_padded=cache.mamba_page_size_padded,
        mamba_type=MambaAttentionBackendEnum.GDN_ATTN,
        tp_replicated=False,
        mamba_cache_mode=cache.mamba_cache_mode,
        num_speculative_blocks=0 if cache.use_replayssm else vc.num_speculative_tokens,
    )
    if checkpoint_alignment is None:
        return spec
    # GatedDeltaNetAttention.get_kv_cache_spec when the layer exports prefill checkpoints.
    return replace(spec, num_prefill_checkpoint_blocks=1,
                   prefill_checkpoint_alignment=abstract.get_mamba_prefill_checkpoint_grid(vc))


def _layer_types(hf_config: Any, num_layers: int) -> list[str]:
    types = getattr(hf_config, "layer_types", None)
    if types is None:
        return ["full_attention"] * num_layers
    return list(types)[:num_layers]


def build_specs(built: BuiltConfig) -> tuple[dict[str, Any], dict[str, str]]:
    """Per-layer KV specs of the target and the draft, with each layer's ledger category."""
    vc = built.vllm_config
    mc = vc.model_config
    specs: dict[str, Any] = {}
    categories: dict[str, str] = {}
    num_target = mc.get_total_num_hidden_layers()
    types = _layer_types(mc.hf_text_config, num_target)
    if len(types) != num_target:
        raise PlanModeLimit(f"target config: {len(types)} layer_types for {num_target} layers")
    for i, kind in enumerate(types):
        if kind == "full_attention":
            name = f"model.layers.{i}.self_attn.attn"
            specs[name], categories[name] = _attention_spec(vc, mc, built.attention_backend, False), "attention_kv"
        elif kind == "linear_attention":
            name = f"model.layers.{i}.linear_attn"
            specs[name], categories[name] = _mamba_spec(vc, built.gdn_checkpoint_alignment), "recurrent_state"
        else:
            raise PlanModeLimit(f"target layer type {kind!r} (layer {i}) is not planned by this adapter")
    spec_cfg = vc.speculative_config
    draft_mc = getattr(spec_cfg, "draft_model_config", None) if spec_cfg is not None else None
    if spec_cfg is not None and spec_cfg.method not in ("ngram", "ngram_gpu", "suffix") and draft_mc is not None:
        num_draft = draft_mc.get_num_layers(vc.parallel_config)
        # Qwen3_5MTP builds every MTP layer as Qwen3_5DecoderLayer(layer_type="full_attention");
        # its hf config carries the target's layer_types, which do not describe the MTP layers.
        draft_types = (["full_attention"] * num_draft if spec_cfg.method == "mtp"
                       else _layer_types(draft_mc.hf_text_config, num_draft))
        for j, kind in enumerate(draft_types):
            if kind != "full_attention":
                raise PlanModeLimit(f"draft layer type {kind!r} (layer {j}) is not planned by this adapter")
            name = f"model.layers.{num_target + j}.self_attn.attn"
            specs[name], categories[name] = (_attention_spec(vc, draft_mc, built.draft_attention_backend
                                                             or built.attention_backend, True), "draft_kv")
    return specs, categories


def plan_kv(built: BuiltConfig, case: dict[str, Any], available_bytes: int | None = None) -> KVPlan:
    """`available_bytes`: what the worker's determine_available_memory returned (a
    gpu_memory_utilization case, see conformance.adapters.vllm.utilization); None on a byte-budget
    case, where the worker returns cache_config.kv_cache_memory_bytes unchanged."""
    from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
    from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts, resolve_kv_cache_layout
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
    from vllm.v1.core.kv_cache_utils import (
        generate_scheduler_kv_cache_config,
        get_max_concurrency_for_kv_cache_config,
    )
    from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs

    vc = built.vllm_config
    register_all_kvcache_specs(vc)
    specs, categories = build_specs(built)
    backends = [built.attention_backend]
    if built.draft_attention_backend is not None and built.draft_attention_backend not in backends:
        backends.append(built.draft_attention_backend)
    if "recurrent_state" in categories.values():
        backends.append(MambaAttentionBackendEnum.GDN_ATTN.get_class())
    layouts = [layout.name for layout in get_supported_kv_cache_layouts(backends)]
    resolve_kv_cache_layout(vc, [layouts], list(specs.values()))
    groups = get_global_kv_cache_groups(vc, [specs])
    # The bytes the planner receives: the worker returns cache_config.kv_cache_memory_bytes
    # unchanged from determine_available_memory when the knob is set (no profiling run).
    available = int(vc.cache_config.kv_cache_memory_bytes if available_bytes is None else available_bytes)
    configs = get_kv_cache_configs(vc, [specs], [available], groups)
    sched_cfg = generate_scheduler_kv_cache_config(configs)
    concurrency = get_max_concurrency_for_kv_cache_config(vc, sched_cfg)
    _finish_like_engine_core(vc, configs, sched_cfg)
    return KVPlan(specs=specs, categories=categories, available_bytes=available, kv_cache_config=configs[0],
                  scheduler_kv_cache_config=sched_cfg, max_concurrency=concurrency, functions=FUNCTIONS)


def _finish_like_engine_core(vc: Any, configs: list, sched_cfg: Any) -> None:
    """The config updates `EngineCore._initialize_kv_caches` makes after planning (block size,
    capacity, hash block size), so the scheduler is built from the same state as in the engine."""
    from vllm.v1.core.kv_cache_utils import (
        resolve_cache_hit_alignment_tokens,
        resolve_kv_cache_block_sizes,
        update_kv_cache_capacity,
    )

    for cfg in configs:
        cfg.kv_cache_layout = vc.cache_config.kv_cache_layout
    vc.cache_config.num_gpu_blocks = sched_cfg.num_blocks
    groups = sched_cfg.kv_cache_groups
    if groups:
        participating = [g.kv_cache_spec.block_size for g in groups if g.kv_cache_spec.prefix_cacheable]
        vc.cache_config.block_size = min(participating or [g.kv_cache_spec.block_size for g in groups])
        update_kv_cache_capacity(vc, sched_cfg)
    vc.validate_block_size()
    scheduler_block_size, hash_block_size = resolve_kv_cache_block_sizes(sched_cfg, vc)
    alignment = resolve_cache_hit_alignment_tokens(sched_cfg, vc, scheduler_block_size, hash_block_size)
    for cfg in (*configs, sched_cfg):
        cfg.hash_block_size = hash_block_size
        cfg.cache_hit_alignment_tokens = alignment
