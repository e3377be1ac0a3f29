"""Pool sizing from `memory.gpu_memory_utilization`, as SGLang 0.5.23's profiler derives it, on a CPU.

Contract: `size_pools_from_fraction(server_args, profile, device)` (server_args resolved with
`mem_fraction_static` = the case's utilization, under the device profile) returns
`(Sizing, Utilization)`: SGLang's pool config for the memory it would find on the profile's
device, and the figures in between. SGLang's own refusal ("Loaded weights leave no GPU memory for
the KV cache ...") raises `Refused` (a ValueError with SGLang's message and the figures so far).

What runs is SGLang's code, with its free-memory probe answering for the profile's device:

    pre_model_load_memory = free memory before the weights load     (bootstrap.measure_pre_model_load_memory)
    (target and draft workers load their weights: conformance.adapters.sglang.weights)
    KVCacheConfigurator._resolve_memory_pool_config(pre_model_load_memory)
        _profile_available_bytes: available = free memory now (after the weights)
            slack  = pre_model_load_memory x (1 - mem_fraction_static)
                     (at least pre_capture_activation_reserve_mb for a mamba model whose KV pool is
                     live after graph capture)
            rest   = available - slack - multimodal reservation -> _handle_max_mamba_cache(rest)
        config_from_budget -> resolve_max_num_reqs -> finalize_with_max_running_requests

Glue (named in provenance): `kv_cache_configurator.get_available_gpu_memory` answers the emulated
free memory (the profile's total, less the assumed init usage, less the weights) and
`get_device_memory_capacity` the profile's memory; pre_model_load_memory is the emulated free memory
before the weights (what SGLang's baseline probe reads); the world-group and launch-world names
SGLang reads are stated for one GPU (a world-group stand-in without a CPU group: nothing to reduce over); `_handle_max_mamba_cache` and `_profile_available_bytes` are
wrapped to record their figures. The figures a GPU would measure come from
`conformance.adapters.sglang.assumed`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Iterator

from conformance.adapters.figures import AssumedFigure
from conformance.adapters.sglang import assumed, weights as sglang_weights
from conformance.adapters.sglang.sizing import GIB_BYTES, Sizing, build_configurator, build_sizing, captured_warnings
from conformance.documents.devices import DeviceProfile

MIB_BYTES = 1 << 20
ONE_GPU_WORLD = {"launch_world_size": 1, "world_group": SimpleNamespace(cpu_group=None)}
RECORDED = ("_handle_max_mamba_cache", "_profile_available_bytes")

FUNCTIONS = (
    "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator._resolve_memory_pool_config",
    "KVCacheConfigurator._profile_available_bytes",
    "sglang.srt.runtime_context.pre_capture_activation_reserve_mb",
) + sglang_weights.FUNCTIONS

GLUE = sglang_weights.GLUE + (
    {"name": "emulated free memory", "description": "kv_cache_configurator.get_available_gpu_memory answers "
     "(profile total - assumed init usage - weights - assumed other resident memory) / GiB and get_device_memory_capacity the profile's MiB; "
     "pre_model_load_memory = (profile total - assumed init usage) / GiB, what SGLang's baseline probe reads "
     "before the weights load; launch_world_size 1 and a world-group stand-in without a CPU group (one GPU, nothing to reduce over); _handle_max_mamba_cache and "
     "_profile_available_bytes wrapped to record their figures"},
)


class Refused(ValueError):
    """SGLang's own refusal (its message), with the figures it was refused on."""

    def __init__(self, exc: BaseException, figures: dict[str, Any]) -> None:
        super().__init__(str(exc))
        self.exception_type = type(exc).__name__
        self.figures = figures


@dataclass(frozen=True)
class Utilization:
    total_memory_bytes: int
    init_used_bytes: int
    weights: sglang_weights.Weights
    mem_fraction_static: float
    pre_model_load_memory_gb: float     # SGLang's units: GiB, as get_available_gpu_memory returns
    available_gpu_memory_gb: float      # free after the weights load
    kv_budget_gb: float                 # available - slack: what _handle_max_mamba_cache receives
    rest_bytes: int                     # _profile_available_bytes: the KV token budget after the mamba pools
    figures: tuple[AssumedFigure, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "total_memory_bytes": self.total_memory_bytes, "init_used_bytes": self.init_used_bytes,
            "weights_bytes": self.weights.total_bytes, "target_weights_bytes": self.weights.target_bytes,
            "draft_weights_bytes": self.weights.draft_bytes, "mem_fraction_static": self.mem_fraction_static,
            "pre_model_load_memory_gb": self.pre_model_load_memory_gb,
            "available_gpu_memory_gb": self.available_gpu_memory_gb, "kv_budget_gb": self.kv_budget_gb,
            "kv_token_budget_bytes": self.rest_bytes,
        }


@contextlib.contextmanager
def _emulated(free_gb: float, capacity_mib: float) -> Iterator[None]:
    from sglang.srt.mem_cache import kv_cache_configurator as configurator
    from sglang.srt.runtime_context import get_parallel

    saved = (configurator.get_available_gpu_memory, configurator.get_device_memory_capacity)
    configurator.get_available_gpu_memory = lambda *args, **kwargs: free_gb
    configurator.get_device_memory_capacity = lambda *args, **kwargs: capacity_mib
    try:
        with get_parallel().override(**ONE_GPU_WORLD):
            yield
    finally:
        configurator.get_available_gpu_memory, configurator.get_device_memory_capacity = saved


@contextlib.contextmanager
def _recording(cls: type, names: tuple[str, ...], calls: list) -> Iterator[None]:
    """Each call of the named methods appends (name, args, result) to `calls` (class-level: the
    configurator has slots)."""
    saved = {name: cls.__dict__[name] for name in names}

    def wrap(name: str, real: Any) -> Any:
        def recorded(self: Any, *args: Any) -> Any:
            out = real(self, *args)
            calls.append((name, args, out))
            return out
        return recorded

    for name, real in saved.items():
        setattr(cls, name, wrap(name, real))
    try:
        yield
    finally:
        for name, real in saved.items():
            setattr(cls, name, real)


def size_pools_from_fraction(server_args: Any, profile: DeviceProfile, device: str) -> tuple[Sizing, Utilization]:
    from sglang.srt import runtime_context
    from sglang.srt.runtime_context import get_schedule

    runtime_context.publish(server_args, role="scheduler")
    init_used = assumed.FIGURES["init_used_bytes"].value_bytes
    resident = assumed.FIGURES["resident_beyond_weights_bytes"].value_bytes
    with captured_warnings() as building:
        kvc = build_configurator(server_args, device)
    weights = sglang_weights.weights_bytes(server_args, kvc.model_config)
    pre_load_gb = (profile.total_memory_bytes - init_used) / GIB_BYTES
    free_gb = (profile.total_memory_bytes - init_used - weights.total_bytes - resident) / GIB_BYTES
    calls: list = []
    try:
        with (captured_warnings() as capture, _emulated(free_gb, profile.total_memory_bytes / MIB_BYTES),
              _recording(type(kvc), RECORDED, calls)):
            config = kvc._resolve_memory_pool_config(pre_load_gb)
    except ValueError as exc:
        raise Refused(exc, {
            "total_memory_bytes": profile.total_memory_bytes, "init_used_bytes": init_used,
            "weights_bytes": weights.total_bytes, "target_weights_bytes": weights.target_bytes,
            "draft_weights_bytes": weights.draft_bytes, "mem_fraction_static": float(get_schedule().mem_fraction_static),
            "pre_model_load_memory_gb": pre_load_gb, "available_gpu_memory_gb": free_gb}) from exc
    recorded = {name: (args, out) for name, args, out in calls}
    rest_bytes = int(recorded["_profile_available_bytes"][1])
    if "_handle_max_mamba_cache" in recorded:
        (budget_gb,), rest_gb = recorded["_handle_max_mamba_cache"]
    else:
        budget_gb = rest_gb = rest_bytes / GIB_BYTES
    sizing = build_sizing(kvc, config, budget_gb, rest_gb, building.lines + capture.lines)
    util = Utilization(
        total_memory_bytes=profile.total_memory_bytes, init_used_bytes=init_used, weights=weights,
        mem_fraction_static=float(get_schedule().mem_fraction_static), pre_model_load_memory_gb=pre_load_gb,
        available_gpu_memory_gb=free_gb, kv_budget_gb=float(budget_gb), rest_bytes=rest_bytes,
        figures=tuple(assumed.FIGURES.values()))
    return sizing, util
