"""KV bytes from `memory.gpu_memory_utilization`, as vLLM 0.33's GPU worker derives them, on a CPU.

Contract: `available_kv_bytes(built, profile)` returns a `Utilization`: the bytes vLLM's
`Worker.determine_available_memory` returns (what the KV planner then receives, as
`kv_cache_memory_bytes` is received on a byte-budget case), vLLM's requested memory, and every
figure in between. A config whose requested memory exceeds the free memory raises vLLM's own
`ValueError` (from `request_memory`).

What runs is vLLM's code, on an emulated device of the profile's memory:

    init_snapshot   = MemorySnapshot(device)                  at Worker.init_device
    requested       = request_memory(init_snapshot, cache_config)     ceil(total x utilization)
    (model load)      weights_memory = conformance.adapters.vllm.weights (vLLM's classes on meta)
    Worker.determine_available_memory(<emulated worker>)
        memory_profiling(init_snapshot, weights_memory) around model_runner.profile_run()
            total_consumed          = init free - free after the profile run
            transient_peak_headroom = torch peak - torch allocated after it
            non_kv_cache_memory     = total_consumed + transient_peak_headroom
        cudagraph estimate          = model_runner.profile_cudagraph_memory()   (if graphs are captured)
        available                   = requested - non_kv_cache_memory - cudagraph estimate (if
                                      VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS), less multimodal reservations

Glue (named in provenance): the emulated device (`MemorySnapshot.measure` and torch.accelerator's
empty_cache / reset_peak_memory_stats read and reset a ledger of the profile's total memory, the
assumed init usage and what the emulated load and profile run allocate); the emulated worker and
model runner handed to `Worker.determine_available_memory` (model_memory_usage = the weights;
profile_run raises the peak by the assumed activation figure and keeps the assumed other consumption;
profile_cudagraph_memory returns the assumed estimate); the profile's CUDA platform as the worker
module's `current_platform`; `compilation_config.cudagraph_mode` set to PIECEWISE for the call (the
plan's config is built with enforce_eager, the GPU default of `vllm serve` captures graphs).
The figures a GPU would measure come from `conformance.adapters.vllm.assumed`.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Iterator

from conformance.adapters.figures import AssumedFigure
from conformance.adapters.vllm import assumed, weights as vllm_weights
from conformance.adapters.vllm.config import BuiltConfig
from conformance.documents.devices import DeviceProfile

DEVICE = "cuda:0"

FUNCTIONS = (
    "vllm.utils.mem_utils.MemorySnapshot",
    "vllm.v1.worker.utils.request_memory",
    "vllm.v1.worker.gpu_worker.Worker.determine_available_memory",
    "vllm.utils.mem_utils.memory_profiling",
    "vllm.multimodal.gpu_ipc_memory.reserve_mm_ipc_gpu_memory",
) + vllm_weights.FUNCTIONS

GLUE = vllm_weights.GLUE + (
    {"name": "emulated device", "description": "MemorySnapshot.measure, torch.accelerator.empty_cache and "
     "reset_peak_memory_stats read / reset a ledger (the profile's total memory; in use: the assumed init usage, "
     "then the weights and the assumed other consumption; torch peak: + the assumed activation peak during "
     "profile_run) instead of a GPU"},
    {"name": "emulated worker", "description": "a stand-in self for vLLM's Worker.determine_available_memory: "
     "cache_config / vllm_config of the case, the init snapshot and request_memory's figure, a model runner whose "
     "model_memory_usage is the weights, whose profile_run moves the emulated device and whose "
     "profile_cudagraph_memory returns the assumed estimate; the profile's CUDA platform as the worker module's "
     "current_platform; compilation_config.cudagraph_mode PIECEWISE for the call (the GPU default captures "
     "graphs; the plan's config is built with enforce_eager)"},
)


@dataclass(frozen=True)
class Utilization:
    available_bytes: int             # what determine_available_memory returns: the KV planner's budget
    requested_bytes: int             # request_memory: ceil(total x gpu_memory_utilization)
    total_memory_bytes: int
    init_used_bytes: int             # in use at the init snapshot (total - its free memory): not charged
    weights: vllm_weights.Weights
    non_kv_cache_bytes: int          # memory_profiling's non_kv_cache_memory
    total_consumed_bytes: int
    transient_peak_headroom_bytes: int
    cudagraph_estimate_bytes: int    # profile_cudagraph_memory's figure
    cudagraph_estimate_applied_bytes: int
    figures: tuple[AssumedFigure, ...]

    def to_json(self) -> dict[str, Any]:
        """The figures vLLM derived (provenance.utilization)."""
        return {
            "total_memory_bytes": self.total_memory_bytes, "init_used_bytes": self.init_used_bytes,
            "requested_memory_bytes": self.requested_bytes,
            "weights_bytes": self.weights.total_bytes, "target_weights_bytes": self.weights.target_bytes,
            "draft_weights_bytes": self.weights.draft_bytes, "total_consumed_bytes": self.total_consumed_bytes,
            "transient_peak_headroom_bytes": self.transient_peak_headroom_bytes,
            "non_kv_cache_memory_bytes": self.non_kv_cache_bytes,
            "cudagraph_memory_estimate_bytes": self.cudagraph_estimate_bytes,
            "cudagraph_memory_estimate_applied_bytes": self.cudagraph_estimate_applied_bytes,
            "available_kv_cache_memory_bytes": self.available_bytes,
        }

    def beside_pool_bytes(self) -> dict[str, int]:
        """The ledger's categories beside the pool, inside the requested memory."""
        return {"weights": self.weights.total_bytes,
                "workspace": self.total_consumed_bytes - self.weights.total_bytes,
                "activations": self.transient_peak_headroom_bytes,
                "cuda_graphs": self.cudagraph_estimate_applied_bytes}


class _Device:
    """The emulated device's memory ledger, in bytes."""

    def __init__(self, total: int, init_used: int) -> None:
        self.total, self.non_torch = total, init_used
        self.allocated = self.peak = 0

    def measure(self, snapshot: Any) -> None:   # MemorySnapshot.measure on this device
        snapshot.torch_peak, snapshot.torch_allocated = self.peak, self.allocated
        snapshot.total_memory = self.total
        snapshot.free_memory = self.total - self.non_torch - self.allocated
        snapshot.cuda_memory = snapshot.total_memory - snapshot.free_memory
        snapshot.torch_memory = self.allocated
        snapshot.non_torch_memory = snapshot.cuda_memory - snapshot.torch_memory
        snapshot.timestamp = time.time()

    def reset_peak(self, device: Any = None) -> None:
        self.peak = self.allocated

    def allocate(self, n: int) -> None:
        self.allocated += n
        self.peak = max(self.peak, self.allocated)


class _ModelRunner:
    def __init__(self, device: _Device, weights_bytes: int, figures: dict[str, int]) -> None:
        self.device, self.model_memory_usage, self.figures = device, weights_bytes, figures

    def profile_run(self, randomize_inputs: bool = False) -> None:
        self.device.peak = max(self.device.peak, self.device.allocated + self.figures["activation_peak_bytes"])

    def profile_cudagraph_memory(self) -> int:
        return self.figures["cudagraph_memory_bytes"]


@contextlib.contextmanager
def _emulated(device: _Device, platform: Any, vc: Any, profiles: list) -> Iterator[None]:
    """vLLM's memory probes read `device`; each MemoryProfilingResult the worker makes lands in `profiles`."""
    import torch
    from vllm.config import CUDAGraphMode
    from vllm.utils import mem_utils
    from vllm.v1.worker import gpu_worker

    real_profiling = gpu_worker.memory_profiling

    @contextlib.contextmanager
    def recorded_profiling(*args: Any, **kwargs: Any) -> Iterator[Any]:
        with real_profiling(*args, **kwargs) as result:
            yield result
        profiles.append(result)

    saved = (mem_utils.MemorySnapshot.measure, torch.accelerator.empty_cache,
             torch.accelerator.reset_peak_memory_stats, gpu_worker.current_platform, gpu_worker.memory_profiling,
             vc.compilation_config.cudagraph_mode)
    mem_utils.MemorySnapshot.measure = lambda snapshot: device.measure(snapshot)
    torch.accelerator.empty_cache = lambda: None
    torch.accelerator.reset_peak_memory_stats = device.reset_peak
    gpu_worker.current_platform = platform
    gpu_worker.memory_profiling = recorded_profiling
    vc.compilation_config.cudagraph_mode = CUDAGraphMode.PIECEWISE
    try:
        yield
    finally:
        (mem_utils.MemorySnapshot.measure, torch.accelerator.empty_cache,
         torch.accelerator.reset_peak_memory_stats, gpu_worker.current_platform, gpu_worker.memory_profiling,
         vc.compilation_config.cudagraph_mode) = saved


def available_kv_bytes(built: BuiltConfig, profile: DeviceProfile) -> Utilization:
    from vllm.utils.mem_utils import MemorySnapshot
    from vllm.v1.worker.gpu_worker import Worker
    from vllm.v1.worker.utils import request_memory

    from conformance.adapters.vllm.platform import profile_platform

    vc = built.vllm_config
    weights = vllm_weights.weights_bytes(built)
    figures = {name: f.value_bytes for name, f in assumed.FIGURES.items()}
    device = _Device(profile.total_memory_bytes, figures["init_used_bytes"])
    platform, _ = profile_platform(profile)
    profiles: list = []
    with _emulated(device, platform, vc, profiles):
        init_snapshot = MemorySnapshot(device=DEVICE)
        requested = request_memory(init_snapshot, vc.cache_config)
        device.allocate(weights.total_bytes)            # load_model
        device.allocate(figures["other_consumed_bytes"])  # runner buffers, workspaces
        runner = _ModelRunner(device, weights.total_bytes, figures)
        worker = SimpleNamespace(
            cache_config=vc.cache_config, vllm_config=vc, model_config=vc.model_config,
            parallel_config=vc.parallel_config, init_snapshot=init_snapshot, requested_memory=requested,
            model_runner=runner, randomize_dummy_inputs=False, use_v2_model_runner=vc.use_v2_model_runner,
            _scoped_allocator_max_split=lambda max_split_size_mb: contextlib.nullcontext())
        available = Worker.determine_available_memory(worker)
    (result,) = profiles
    # The worker's peak_activation_memory is the headroom plus the estimate it applied.
    applied = int(worker.peak_activation_memory - result.transient_peak_headroom)
    return Utilization(
        available_bytes=int(available), requested_bytes=int(requested), total_memory_bytes=profile.total_memory_bytes,
        init_used_bytes=int(init_snapshot.total_memory - init_snapshot.free_memory), weights=weights, non_kv_cache_bytes=int(result.non_kv_cache_memory),
        total_consumed_bytes=int(result.total_consumed), transient_peak_headroom_bytes=int(result.transient_peak_headroom),
        cudagraph_estimate_bytes=int(worker.cudagraph_memory_estimate), cudagraph_estimate_applied_bytes=applied,
        figures=tuple(assumed.FIGURES.values()))
