"""SGLang 0.5.23 pool sizing without a ModelRunner: the profiler's own sequence on a given budget.

Contract: `size_pools(server_args, budget_bytes)` publishes `server_args` (role "scheduler";
SGLang's publish is last-publish-wins, so each call starts from a fresh process config), builds
`ModelConfig.from_server_args`, a `KVCacheConfigurator(device="cuda", model=None, ...)` with the
pieces a ModelRunner would hand it (spec aux config, layer info, KV dtype), and runs what
`KVCacheConfigurator._resolve_memory_pool_config` runs after measuring free GPU memory:

    rest_gb = _handle_max_mamba_cache(budget_gb)      # hybrid models: state slots + spec scratch
    config  = config_from_budget(int(rest_gb * 2**30))   # KV tokens (target + draft cell)
    config.max_running_requests = resolve_max_num_reqs(config.max_total_num_tokens)
    config  = create_memory_pool_configurator(kvc).finalize_with_max_running_requests(config)

`budget_bytes` stands in for what the profiler measures (free memory after weights, minus the
non-static slack): the case's kv_cache_bytes. Returns a `Sizing`; the WARNING lines SGLang logs
while sizing (the "capped ... by the mamba state cache" line among them) are in `log_lines`.
A gpu_memory_utilization case runs the profiler's own `_resolve_memory_pool_config` instead
(conformance.adapters.sglang.utilization); both build the `Sizing` with `build_sizing`.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any, Iterator

GIB_BYTES = 1 << 30
FUNCTIONS = (
    "sglang.srt.server_args.ServerArgs.resolve_once",
    "sglang.srt.runtime_context.publish(role='scheduler')",
    "sglang.srt.configs.model_config.ModelConfig.from_server_args",
    "sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state.resolve_spec_aux_hidden_state_config",
    "sglang.srt.model_executor.model_runner_components.layer_setup.resolve_layer_indices",
    "sglang.srt.mem_cache.kv_cache_dtype.configure_kv_cache_dtype",
    "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator(model=None)",
    "KVCacheConfigurator._handle_max_mamba_cache",
    "KVCacheConfigurator.config_from_budget",
    "KVCacheConfigurator.resolve_max_num_reqs",
    "KVCacheConfigurator._calculate_mamba_ratio",
    "sglang.srt.model_executor.pool_configurator.create_memory_pool_configurator",
    "DefaultPoolConfigurator._compute_cell_size",
    "MemoryPoolConfigurator.finalize_with_max_running_requests",
    "sglang.srt.mem_cache.allocation_sizing.get_alloc_reserve_per_decode",
    "sglang.srt.mem_cache.memory_pool.ReqToTokenPool",
)


@dataclass
class Sizing:
    kvc: Any                                   # the KVCacheConfigurator (the trace builds pools from it)
    pool_config: Any                           # SGLang's MemoryPoolConfig
    page_size_tokens: int
    max_total_num_tokens: int
    max_running_requests: int                  # after resolve_max_num_reqs and finalize
    kv_bytes_per_token: int                    # the cell SGLang sizes tokens with (target + draft)
    target_kv_bytes_per_token: int
    draft_kv_bytes_per_token: int
    is_hybrid: bool
    max_mamba_cache_size: int | None = None
    state_slots_per_request: int | None = None  # SGLang's mamba ratio
    mamba_state_bytes_per_slot: int | None = None
    recurrent_state_bytes: int | None = None    # (max_mamba_cache_size + 1 padding slot) x per slot
    intermediate_state_bytes: int | None = None  # speculative-verify SSM/conv scratch SGLang reserves
    log_lines: list[str] = field(default_factory=list)


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def build_configurator(server_args: Any, device: str) -> Any:
    """A KVCacheConfigurator as ModelRunner.init_kv_cache_configurator builds one, without a model."""
    from sglang.srt.configs.model_config import AttentionArch, ModelConfig
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
    from sglang.srt.mem_cache.kv_cache_dtype import configure_kv_cache_dtype
    from sglang.srt.model_executor.model_runner_components.kv_pool_runtime import is_post_capture_kv_active
    from sglang.srt.model_executor.model_runner_components.layer_setup import resolve_layer_indices
    from sglang.srt.model_executor.model_runner_components.load_model_utils import resolve_sliding_window_size
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        resolve_spec_aux_hidden_state_config,
    )
    from sglang.srt.runtime_context import get_model, get_parallel, get_schedule, get_spec
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    model_config = ModelConfig.from_server_args(server_args)
    algo = SpeculativeAlgorithm.from_string(get_spec().speculative_algorithm)
    aux = resolve_spec_aux_hidden_state_config(server_args=server_args, model_config=model_config,
                                               spec_algorithm=algo, is_draft_worker=False)
    resolved_kv, kv_dtype = configure_kv_cache_dtype(
        server_args_kv_cache_dtype=get_model().kv_cache_dtype, model=None, model_dtype=model_config.dtype,
        is_draft_worker=False, is_dflash=algo.is_dflash_family(),
        speculative_draft_attention_backend=get_spec().speculative_draft_attention_backend,
        speculative_draft_kv_cache_dtype=get_spec().speculative_draft_kv_cache_dtype)
    return KVCacheConfigurator(
        device=device, gpu_id=0, attn_dp_size=get_parallel().attn_dp_size, pp_size=1, pp_group=None, model=None,
        model_config=model_config, server_args=server_args, kv_cache_dtype=kv_dtype,
        kv_cache_dtype_str=resolved_kv if resolved_kv is not None else get_model().kv_cache_dtype,
        model_dtype=model_config.dtype, page_size=get_schedule().page_size,
        sliding_window_size=resolve_sliding_window_size(None, model_config), spec_algorithm=algo,
        is_draft_worker=False,
        post_capture_kv_active=is_post_capture_kv_active(server_args=server_args, is_draft_worker=False,
                                                         spec_algorithm=algo, token_to_kv_pool_allocator=None),
        spec_aux_config=aux, is_hybrid_swa=model_config.is_hybrid_swa,
        is_hybrid_swa_compress=model_config.is_hybrid_swa_compress,
        use_mla_backend=model_config.attention_arch == AttentionArch.MLA,
        layer_info=resolve_layer_indices(model=None, model_config=model_config, is_draft_worker=False),
        forward_stream=None, req_to_token_pool=None, token_to_kv_pool_allocator=None, memory_pool_config=None)


def _target_cell_bytes(kvc: Any, pool_configurator: Any) -> int:
    """Target-only KV bytes per token: SGLang's `_compute_cell_size` over the layers it counts."""
    from sglang.srt.configs.hybrid_arch import mambaish_config

    mambaish = mambaish_config(kvc.model_config)
    if mambaish is not None:
        info = kvc.layer_info
        num_layers = len([i for i in mambaish.full_attention_layer_ids if info.start_layer <= i < info.end_layer])
    else:
        num_layers = kvc.layer_info.num_effective_layers
    return int(pool_configurator._compute_cell_size(kvc, num_layers))


@contextlib.contextmanager
def captured_warnings() -> Iterator[_Capture]:
    """The WARNING lines SGLang logs inside the block, in `.lines`."""
    capture = _Capture()
    sglang_logger = logging.getLogger("sglang")
    sglang_logger.addHandler(capture)
    try:
        yield capture
    finally:
        sglang_logger.removeHandler(capture)


def build_sizing(kvc: Any, config: Any, budget_gb: float, rest_gb: float, log_lines: list[str]) -> Sizing:
    """The Sizing record of SGLang's pool config; `budget_gb` -> `rest_gb` is what _handle_max_mamba_cache
    took for the state slots and the verify scratch (equal for a model without mamba layers)."""
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator
    from sglang.srt.runtime_context import get_schedule

    pool_configurator = create_memory_pool_configurator(kvc)   # its __init__ computes the cell size
    cell = int(getattr(pool_configurator, "_cell_size"))
    target_cell = _target_cell_bytes(kvc, pool_configurator)
    is_hybrid = kvc.mambaish_config is not None
    sizing = Sizing(
        kvc=kvc, pool_config=config, page_size_tokens=int(get_schedule().page_size),
        max_total_num_tokens=int(config.max_total_num_tokens), max_running_requests=int(config.max_running_requests),
        kv_bytes_per_token=cell, target_kv_bytes_per_token=target_cell, draft_kv_bytes_per_token=cell - target_cell,
        is_hybrid=is_hybrid, log_lines=log_lines)
    if is_hybrid:
        per_slot = int(kvc.mambaish_config.mamba2_cache_params.mamba_cache_per_req)
        slots = int(get_schedule().max_mamba_cache_size)
        state_bytes = (slots + 1) * per_slot
        sizing.max_mamba_cache_size = slots
        sizing.state_slots_per_request = int(kvc._calculate_mamba_ratio())
        sizing.mamba_state_bytes_per_slot = per_slot
        sizing.recurrent_state_bytes = state_bytes
        # What _handle_max_mamba_cache took from the budget beyond the state slots.
        sizing.intermediate_state_bytes = max(round((budget_gb - rest_gb) * GIB_BYTES) - state_bytes, 0)
    return sizing


def size_pools(server_args: Any, budget_bytes: int, device: str) -> Sizing:
    from sglang.srt import runtime_context
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator

    # Re-publish first: it drops the previous plan's config-bag overrides (and logs that it did,
    # a line about the previous case, so the capture starts after it).
    runtime_context.publish(server_args, role="scheduler")
    with captured_warnings() as capture:
        kvc = build_configurator(server_args, device)
        budget_gb = budget_bytes / GIB_BYTES
        is_hybrid = kvc.mambaish_config is not None
        rest_gb = kvc._handle_max_mamba_cache(budget_gb) if is_hybrid else budget_gb
        config = kvc.config_from_budget(int(rest_gb * GIB_BYTES))
        config.max_running_requests = kvc.resolve_max_num_reqs(config.max_total_num_tokens)
        config = create_memory_pool_configurator(kvc).finalize_with_max_running_requests(config)
    return build_sizing(kvc, config, budget_gb, rest_gb, capture.lines)
