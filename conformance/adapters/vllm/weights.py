"""The bytes vLLM 0.33's GPU worker counts as weights (`model_runner.model_memory_usage`), on a CPU.

Contract: `weights_bytes(built)` returns a `Weights`: the bytes of every parameter and buffer that
stays allocated after the V2 model runner's `load_model` (the target, then the draft through the
speculator), counted once each (a draft that shares the target's embedding or lm_head adds nothing
for it), and the per-model split.

How: vLLM's own model classes are built on the meta device, so nothing is allocated:

    target  get_model_loader(load_config).load_model(vllm_config, model_config)   (DummyModelLoader:
            set_default_torch_dtype(model dtype), the model class, dummy weight init on meta)
    draft   vllm.v1.worker.gpu.spec_decode.init_speculator(vllm_config, meta, None).load_model(target)
            (DraftModelSpeculator.load_model: the method's draft loader, which shares the target's
            embedding / lm_head where vLLM shares them)

Glue (named in provenance): the models are built from a deep copy of the case's VllmConfig with
`load_config.device = "meta"` (the GPU worker builds them on cuda; the copy keeps the build's side
effects, and the CPU platform's checks the draft loader's `replace(vllm_config, ...)` re-runs, out of
the config the KV planning and the trace use); a one-rank gloo world (`init_distributed_environment`
+ `ensure_model_parallel_initialized`, torn down after the build), which the parallel layers read; each tensor's bytes
rounded up to the CUDA caching allocator's 512-byte block (what `torch.cuda.memory_allocated`, the
figure `DeviceMemoryProfiler` reads, counts). Only the V2 model runner's path is emulated: a case
vLLM plans on Model Runner V1 raises `PlanModeLimit`.
"""

from __future__ import annotations

import contextlib
import copy
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Iterator

from conformance.adapters.meta_tensors import allocated_bytes, distinct_tensors
from conformance.adapters.vllm.config import BuiltConfig, PlanModeLimit, model_runner_env

DRAFTLESS_METHODS = ("ngram", "ngram_gpu", "suffix")   # no draft model (as kv.build_specs)

FUNCTIONS = (
    "vllm.model_executor.model_loader.get_model_loader",
    "vllm.model_executor.model_loader.dummy_loader.DummyModelLoader.load_model",
    "vllm.v1.worker.gpu.spec_decode.init_speculator",
    "vllm.v1.worker.gpu.spec_decode.speculator.DraftModelSpeculator.load_model",
)

GLUE = (
    {"name": "weights on the meta device", "description": "vLLM's model classes built with load_config.device "
     "= 'meta' on a deep copy of the case's VllmConfig (target: DummyModelLoader.load_model; draft: init_speculator(...).load_model(target), which "
     "shares the target's embedding / lm_head as vLLM does) under a one-rank gloo world (torn down after); weights bytes = every "
     "distinct parameter and buffer of target and draft, each rounded up to 512 bytes (the CUDA caching "
     "allocator's block, as torch.cuda.memory_allocated counts it)"},
)


@dataclass(frozen=True)
class Weights:
    total_bytes: int
    target_bytes: int
    draft_bytes: int           # what the draft adds beyond what it shares with the target
    num_tensors: int


@contextlib.contextmanager
def _one_rank_world() -> Iterator[None]:
    """vLLM's process groups for one GPU (gloo, one rank), torn down after the build."""
    from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment
    from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

    path = os.path.join(tempfile.gettempdir(), f"conformance-vllm-world-{os.getpid()}")
    if os.path.exists(path):
        os.unlink(path)
    init_distributed_environment(world_size=1, rank=0, distributed_init_method=f"file://{path}",
                                 local_rank=0, backend="gloo")
    try:
        ensure_model_parallel_initialized(1, 1)
        yield
    finally:
        destroy_model_parallel()
        destroy_distributed_environment()


def weights_bytes(built: BuiltConfig) -> Weights:
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader import get_model_loader

    if not built.vllm_config.use_v2_model_runner:
        raise PlanModeLimit("weights on Model Runner V1 are not emulated (the V2 runner's load_model is)")
    # A copy: building registers layers in its forward context, and the draft loader's
    # replace(vllm_config, ...) re-runs the platform's config checks, which on this CPU host would
    # switch the shared scheduler config's async scheduling off.
    vc = copy.deepcopy(built.vllm_config)
    vc.load_config.device = "meta"
    with model_runner_env(built), set_current_vllm_config(vc), _one_rank_world():
        target = get_model_loader(vc.load_config).load_model(vllm_config=vc, model_config=vc.model_config)
        tensors = distinct_tensors(target)
        target_bytes = allocated_bytes(tensors.values())
        draft_bytes = 0
        spec = vc.speculative_config
        if spec is not None and spec.method not in DRAFTLESS_METHODS:
            from vllm.v1.worker.gpu.spec_decode import init_speculator
            from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

            speculator = init_speculator(vc, torch.device("meta"), None)
            if isinstance(speculator, DraftModelSpeculator):
                speculator.load_model(target)
                extra = {k: t for k, t in distinct_tensors(speculator.model).items() if k not in tensors}
                draft_bytes = allocated_bytes(extra.values())
                tensors.update(extra)
    return Weights(total_bytes=target_bytes + draft_bytes, target_bytes=target_bytes, draft_bytes=draft_bytes,
                   num_tensors=len(tensors))
