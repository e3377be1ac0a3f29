"""SGLang 0.5.23's pools at their real sizes with their storage never materialised: the meta device.

Contract: inside `storage_on_meta()`, every floating-point tensor a fill factory creates (`torch.zeros`,
`empty`, `ones`, `full`, `empty_strided` and the `Tensor.new_*` forms: tensors whose values are a
constant or unset, so no value is lost) is created on torch's `meta` device: it has its shape,
dtype, strides and byte size but no storage. Integer and bool tensors, and every tensor built from
data (`torch.tensor`, `as_tensor`, `arange`), are created where SGLang asks (the CPU). The trace wraps only
`KVCacheConfigurator._init_pools` in it, so SGLang's own pool classes build, unchanged, pools of
the sizes SGLang derived:

    storage (floating point)  -> meta      KV buffers (target and draft layers), mamba conv / temporal
                                           state, the speculative-verify SSM and conv scratch
    bookkeeping (integer)     -> CPU       req_to_token, the token allocator's free list, the mamba
                                           allocator's free slots, per-request mamba indices

Everything the scheduler reads to decide is bookkeeping: the allocators hand out and take back CPU
indices, and the tree cache, PrefillAdder, check_decode_mem and retract_decode count them. The few
writes SGLang makes into state while scheduling (a mamba slot cleared on allocation, a copy on
copy-on-write) index a meta tensor with CPU indices, which torch accepts and computes nothing.
Reading a value out of meta storage raises, so a decision that depended on stored values could not
pass silently. The yielded `StorageLedger` counts the bytes of every tensor those constructors made,
by where they went (views and tensors derived from them are not counted again).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

META_DEVICE = "meta"


@dataclass
class StorageLedger:
    """Bytes SGLang's pool construction asked for, by where they went."""

    unmaterialised_bytes: int = 0       # floating-point fill tensors created on meta
    materialised_bytes: int = 0         # integer / bool fill tensors and data-built tensors, on the CPU
    num_unmaterialised_tensors: int = 0
    num_materialised_tensors: int = 0

    def record(self, tensor: Any) -> None:
        nbytes = int(tensor.numel()) * int(tensor.element_size())
        if tensor.device.type == META_DEVICE:
            self.unmaterialised_bytes += nbytes
            self.num_unmaterialised_tensors += 1
        else:
            self.materialised_bytes += nbytes
            self.num_materialised_tensors += 1

    def as_provenance(self) -> dict[str, Any]:
        return {"storage_device": META_DEVICE, "unmaterialised_bytes": self.unmaterialised_bytes,
                "num_unmaterialised_tensors": self.num_unmaterialised_tensors,
                "materialised_bytes": self.materialised_bytes,
                "num_materialised_tensors": self.num_materialised_tensors}


def _constructors() -> tuple[frozenset, frozenset, frozenset]:
    """(fill factories, their Tensor.new_* forms, data-built constructors that stay where asked)."""
    import torch

    plain = frozenset({torch.zeros, torch.empty, torch.ones, torch.full, torch.empty_strided})
    methods = frozenset({torch.Tensor.new_zeros, torch.Tensor.new_empty, torch.Tensor.new_ones,
                         torch.Tensor.new_full, torch.Tensor.new_empty_strided})
    from_data = frozenset({torch.tensor, torch.as_tensor, torch.arange})
    return plain, methods, from_data


def _requested_dtype(func: Any, args: tuple, kwargs: dict[str, Any], methods: frozenset) -> Any:
    import torch

    dtype = kwargs.get("dtype")
    if dtype is not None:
        return dtype
    if func in methods:
        return args[0].dtype  # new_* default to the source tensor's dtype
    fill = args[1] if func is torch.full and len(args) > 1 else kwargs.get("fill_value")
    if func is torch.full and isinstance(fill, bool):
        return torch.bool  # torch.full infers its dtype from the fill value
    if func is torch.full and isinstance(fill, int):
        return torch.int64
    return torch.get_default_dtype()


@contextlib.contextmanager
def storage_on_meta() -> Iterator[StorageLedger]:
    """Create floating-point factory tensors on meta while the block runs (see the module docstring)."""
    from torch.overrides import TorchFunctionMode

    plain, methods, from_data = _constructors()
    ledger = StorageLedger()

    class _MetaStorage(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = dict(kwargs or {})
            if func in from_data:
                out = func(*args, **kwargs)
                ledger.record(out)
                return out
            if func not in plain and func not in methods:
                return func(*args, **kwargs)
            if _requested_dtype(func, args, kwargs, methods).is_floating_point:
                kwargs["device"] = META_DEVICE
                kwargs.pop("pin_memory", None)
            out = func(*args, **kwargs)
            ledger.record(out)
            return out

    with _MetaStorage():
        yield ledger
