"""The weights SGLang 0.5.23 holds on the device before it sizes the KV pools, counted on a CPU.

Contract: `weights_bytes(server_args)` (after `runtime_context.publish`, under the device profile)
returns a `Weights`: the bytes of every parameter and buffer of the target model and of the
draft model, each counted once, as the target and draft workers load them before
`Scheduler.init_target_memory_pool` sizes the pools (SGLang's `_profile_available_bytes` charges
whatever is resident then).

How: SGLang's own loader path on the meta device: `ModelConfig.from_server_args` (the target; the
draft with `speculative_draft_model_path`, `is_draft_model=True`, as TpModelWorker builds them) and
`sglang.srt.model_loader.get_model(model_config, LoadConfig(load_format="dummy"), DeviceConfig)`.
A DFLASH draft has no embedding or head of its own (it borrows the target's).

Glue (named in provenance): the device is `meta`; SGLang's dummy weight fill
(`initialize_dummy_weights`, which draws random values on the device) is skipped for the build;
a one-rank gloo world and SGLang's model-parallel groups (torn down after the build), and the
process's tensor / pipeline / attention-TP ranks stated as 0 (`get_parallel().override`: one GPU); the rotary module's import-time `_is_cuda` flag is set as on the profile's CUDA device
(it decides the rotary cache's dtype, float32 on CUDA); each tensor's bytes rounded up to the CUDA
caching allocator's 512-byte block.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Iterator

from conformance.adapters.meta_tensors import allocated_bytes, distinct_tensors

ONE_GPU_RANKS = {"tp_rank": 0, "pp_rank": 0, "attn_tp_rank": 0}

FUNCTIONS = (
    "sglang.srt.configs.model_config.ModelConfig.from_server_args(is_draft_model=True)",
    "sglang.srt.model_loader.get_model",
    "sglang.srt.model_loader.loader.DummyModelLoader.load_model",
)

GLUE = (
    {"name": "weights on the meta device", "description": "SGLang's get_model (DummyModelLoader) for the target "
     "and the draft ModelConfig built on device meta, without the random dummy fill, in a one-rank gloo world "
     "(torn down after) with tp/pp/attn-tp ranks 0 "
     "and the rotary module's _is_cuda flag true (the profile is a CUDA device); weights bytes = every distinct "
     "parameter and buffer, each rounded up to 512 bytes (the CUDA caching allocator's block)"},
)


@dataclass(frozen=True)
class Weights:
    total_bytes: int
    target_bytes: int
    draft_bytes: int


@contextlib.contextmanager
def _one_rank_world() -> Iterator[None]:
    """SGLang's process groups for one GPU (gloo, one rank), torn down after the build so no later
    plan of this process sees them."""
    from sglang.srt.distributed import parallel_state

    path = os.path.join(tempfile.gettempdir(), f"conformance-sglang-world-{os.getpid()}")
    if os.path.exists(path):
        os.unlink(path)
    parallel_state.init_distributed_environment(world_size=1, rank=0, distributed_init_method=f"file://{path}",
                                                local_rank=0, backend="gloo")
    try:
        parallel_state.initialize_model_parallel()
        yield
    finally:
        parallel_state.destroy_model_parallel()
        parallel_state.destroy_distributed_environment()


@contextlib.contextmanager
def _meta_build() -> Iterator[Any]:
    import sglang.srt.layers.rotary_embedding.base as rotary
    import sglang.srt.model_loader.loader as loader
    from sglang.srt.configs.device_config import DeviceConfig
    from sglang.srt.runtime_context import get_parallel

    import torch

    device_config = DeviceConfig("cpu")
    device_config.device = torch.device("meta")
    saved = (loader.initialize_dummy_weights, rotary._is_cuda)
    loader.initialize_dummy_weights = lambda model, *args, **kwargs: None
    rotary._is_cuda = True
    try:
        with _one_rank_world(), get_parallel().override(**ONE_GPU_RANKS):
            yield device_config
    finally:
        loader.initialize_dummy_weights, rotary._is_cuda = saved


def weights_bytes(server_args: Any, target_model_config: Any) -> Weights:
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader import get_model
    from sglang.srt.runtime_context import get_spec

    with _meta_build() as device_config:
        target = get_model(model_config=target_model_config, load_config=LoadConfig(load_format="dummy"),
                           device_config=device_config)
        tensors = distinct_tensors(target)
        target_bytes = allocated_bytes(tensors.values())
        draft_bytes = 0
        draft_path = get_spec().speculative_draft_model_path
        if draft_path:
            draft_config = ModelConfig.from_server_args(server_args, model_path=draft_path, is_draft_model=True,
                                                        context_length=target_model_config.context_len)
            draft = get_model(model_config=draft_config, load_config=LoadConfig(load_format="dummy"),
                              device_config=device_config)
            extra = {k: t for k, t in distinct_tensors(draft).items() if k not in tensors}
            draft_bytes = allocated_bytes(extra.values())
    return Weights(total_bytes=target_bytes + draft_bytes, target_bytes=target_bytes, draft_bytes=draft_bytes)
