"""Bytes of a model built on the meta device, as the CUDA caching allocator would hand them out.

Shared by the oracle adapters' weight sizing (vllm/weights.py, sglang/weights.py), each run inside
its oracle's venv: `distinct_tensors(module)` every parameter and buffer once (tied weights
counted once, by identity); `allocated_bytes(tensors)` their bytes, each rounded up to the
allocator's 512-byte block.
"""

from __future__ import annotations

from typing import Any, Iterable

ALLOCATOR_BLOCK_BYTES = 512   # torch's CUDA caching allocator rounds every allocation up to this


def distinct_tensors(module: Any) -> dict[int, Any]:
    found = dict(module.named_parameters(remove_duplicate=False))
    found.update(module.named_buffers(remove_duplicate=False))
    return {id(t): t for t in found.values()}


def allocated_bytes(tensors: Iterable[Any]) -> int:
    return sum(-(-(t.numel() * t.element_size()) // ALLOCATOR_BLOCK_BYTES) * ALLOCATOR_BLOCK_BYTES for t in tensors)
