r"""The unified pool: every cache the engine keeps lives in ONE budgeted byte allocation.

Contract (the runtime codes against it; keep it stable):

- `PoolLayout` (frozen, from `engine_under_test.memory.planner.plan_memory(...).layout`) says
  everything about the bytes: `num_blocks`, `page_size_bytes` (one layer's page: ONE size for
  every layer), `num_page_slots` (pages in one block), `block_size_tokens` (tokens in one
  attention page), the cache groups and which (group, slot) each layer uses.
- `UnifiedPool(layout)` never allocates on construction (plan mode builds it for sizes only).
  `pool.allocate(device)` allocates it once: `pool.tensor` is uint8
  `[num_page_slots, num_blocks, page_size_bytes]` (`layout.total_bytes` bytes in all).
  A second `allocate` raises.
- Typed views (after `allocate`), zero-copy, indexed by block id:
    `attention_kv(layer_name) -> (k, v)`, each `[num_blocks, block_size_tokens, num_kv_heads,
    head_dim]` in the kv dtype, for target AND draft attention layers;
    `recurrent_state(layer_name) -> (conv, ssm)`: conv `[num_blocks, conv_dim, conv_state_len]`
    (conv_state_len = conv_kernel - 1 + k), ssm `[num_blocks, num_v_heads, head_v_dim,
    head_k_dim]`, in their dtypes. A state slot is one block.
- Layer names: "target.layers.{i}" (i over all target layers, attention and GDN) and
  "draft.layers.{i}". `layout.group_of(layer_name)` gives the cache group whose block ids
  (from the scheduler output) index that layer's view.

Page layout (layer-outer; block b of page slot s lives at `tensor[s, b]`):

    tensor[s]  |  block 0  |  block 1  |  block 2  | ...  | block N-1 |     s = 0 .. S-1
                \_ page_size_bytes _/

    one attention page (a block of an attention group, slot s = that layer's slot):
    | K [block_size_tokens, kv_heads, head_dim] | V [block_size_tokens, kv_heads, head_dim] |
    one state page (a block of a state group = one state slot of one sequence):
    | conv [conv_dim, kernel-1+k] | SSM [v_heads, v_dim, k_dim] | padding to page_size_bytes |

    block id b is owned by ONE group at a time; that group's layers use tensor[slot(layer), b].
    Groups with fewer layers than S leave their remaining slots of b unused (vLLM's padding).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine_under_test.memory.groups import CacheGroup
from engine_under_test.memory.specs import AttentionLayerSpec, StateLayerSpec

if TYPE_CHECKING:  # torch is imported lazily: plan mode runs without allocating
    import torch

_TORCH_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16", "fp8": "float8_e4m3fn"}


@dataclass(frozen=True)
class PoolLayout:
    num_blocks: int
    page_size_bytes: int
    num_page_slots: int
    block_size_tokens: int
    groups: tuple[CacheGroup, ...]
    layer_slots: dict[str, tuple[int, int]] = field(repr=False)   # layer -> (group_id, slot)

    @property
    def bytes_per_block(self) -> int:
        return self.num_page_slots * self.page_size_bytes

    @property
    def total_bytes(self) -> int:
        return self.num_blocks * self.bytes_per_block

    def group_of(self, layer_name: str) -> CacheGroup:
        return self.groups[self._slot(layer_name)[0]]

    def slot_of(self, layer_name: str) -> int:
        return self._slot(layer_name)[1]

    def _slot(self, layer_name: str) -> tuple[int, int]:
        try:
            return self.layer_slots[layer_name]
        except KeyError:
            raise KeyError(f"no layer {layer_name!r} in the pool (layers: {', '.join(self.layer_slots)})") from None

    @property
    def attention_group_ids(self) -> tuple[int, ...]:
        return tuple(g.group_id for g in self.groups if g.is_attention)

    @property
    def state_group_ids(self) -> tuple[int, ...]:
        return tuple(g.group_id for g in self.groups if g.is_state)

    def to_json(self) -> dict[str, Any]:
        return {
            "num_blocks": self.num_blocks, "page_size_bytes": self.page_size_bytes,
            "num_page_slots": self.num_page_slots, "block_size_tokens": self.block_size_tokens,
            "bytes_per_block": self.bytes_per_block, "total_bytes": self.total_bytes,
            "groups": [{"group_id": g.group_id, "kind": "attention" if g.is_attention else "state",
                        "num_layers": len(g.layer_names)} for g in self.groups],
        }


def build_layout(num_blocks: int, groups: tuple[CacheGroup, ...], group_size: int) -> PoolLayout:
    """A layout over `groups` (from `memory.groups.group_layers`); every spec has one page size."""
    pages = {g.spec.page_size_bytes for g in groups}
    if len(pages) != 1:
        raise ValueError(f"unified pool needs one page size, got {sorted(pages)}")
    block_sizes = {g.spec.block_size_tokens for g in groups if isinstance(g.spec, AttentionLayerSpec)}
    if len(block_sizes) > 1:
        raise ValueError(f"attention groups disagree on block size: {sorted(block_sizes)}")
    slots = {name: (g.group_id, s) for g in groups for s, name in enumerate(g.layer_names)}
    return PoolLayout(num_blocks=num_blocks, page_size_bytes=pages.pop(), num_page_slots=group_size,
                      block_size_tokens=block_sizes.pop() if block_sizes else 0, groups=groups, layer_slots=slots)


class UnifiedPool:
    """One byte tensor and typed zero-copy views of it (see the module docstring)."""

    def __init__(self, layout: PoolLayout):
        self.layout = layout
        self._tensor: torch.Tensor | None = None

    @property
    def is_allocated(self) -> bool:
        return self._tensor is not None

    @property
    def tensor(self) -> torch.Tensor:
        if self._tensor is None:
            raise RuntimeError("the pool is not allocated (plan mode); call allocate(device) first")
        return self._tensor

    def allocate(self, device: Any) -> torch.Tensor:
        """Allocate the whole pool once on `device` (zero-filled)."""
        import torch

        if self._tensor is not None:
            raise RuntimeError("the pool is already allocated")
        lay = self.layout
        self._tensor = torch.zeros((lay.num_page_slots, lay.num_blocks, lay.page_size_bytes), dtype=torch.uint8, device=device)
        return self._tensor

    def _page(self, layer_name: str) -> torch.Tensor:
        return self.tensor[self.layout.slot_of(layer_name)]          # [num_blocks, page_size_bytes]

    @staticmethod
    def _typed(raw: torch.Tensor, dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
        import torch

        return raw.view(getattr(torch, _TORCH_DTYPES[dtype])).unflatten(-1, shape)

    def attention_kv(self, layer_name: str) -> tuple[torch.Tensor, torch.Tensor]:
        spec = self.layout.group_of(layer_name).spec
        if not isinstance(spec, AttentionLayerSpec):
            raise KeyError(f"{layer_name!r} is not an attention layer")
        page = self._page(layer_name)
        half = spec.page_size_bytes // 2
        shape = (spec.block_size_tokens, spec.num_kv_heads, spec.head_dim)
        return self._typed(page[:, :half], spec.dtype, shape), self._typed(page[:, half:2 * half], spec.dtype, shape)

    def recurrent_state(self, layer_name: str) -> tuple[torch.Tensor, torch.Tensor]:
        spec = self.layout.group_of(layer_name).spec
        if not isinstance(spec, StateLayerSpec):
            raise KeyError(f"{layer_name!r} is not a recurrent-state layer")
        page = self._page(layer_name)
        conv = self._typed(page[:, :spec.conv_bytes], spec.conv_dtype, spec.conv_shape)
        ssm = self._typed(page[:, spec.conv_bytes:spec.state_bytes], spec.ssm_dtype, spec.ssm_shape)
        return conv, ssm
