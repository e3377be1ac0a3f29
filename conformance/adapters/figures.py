"""Figures plan mode assumes where the engine would measure its device, shared by the oracle adapters.

Contract: an `AssumedFigure` is bytes with where the value comes from; an adapter that plans with
one lists it (name, value, source) in the observation's `provenance.assumed`. Plan mode runs on a
CPU, so these stand in for what the engine's own process would find on the device. Constants here
were measured on real hardware; engine-specific figures live in each adapter's `assumed` module.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class AssumedFigure:
    name: str
    value_bytes: int
    source: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# After the CUDA context and the cuBLAS / cuBLASLt handles exist (torch.mm, and linear with a
# bias, on a 16x16 bf16 tensor, then empty_cache): total - free from cudaMemGetInfo.
CUDA_CONTEXT_BYTES = 753_729_536
CUDA_CONTEXT_SOURCE = (
    "measured on one NVIDIA H200 (torch 2.11.0+cu130, CUDA 13.0, driver 580.159.04): device memory in use once "
    "the CUDA context and the cuBLAS / cuBLASLt handles exist (torch.mm and linear with bias on a 16x16 bf16 "
    "tensor, then empty_cache); the oracles' own torch builds were not measured; used for every device profile")
