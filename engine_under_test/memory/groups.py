"""Cache groups: which layers share one block table, and how many pages one block holds.

Contract: `group_layers(specs)` returns `CacheGroup`s the way vLLM 0.33's
`_get_kv_cache_groups_uniform_page_size` forms them: layers with equal specs form a bucket
(target and draft attention layers of one geometry share a bucket, hence a block table);
buckets are split into groups of `group_size` layers (the smallest bucket, or the largest
when it is under 1.5x the smallest), taking `layers[i::num_groups]`. A block id belongs to one
group at a time and spans `group_size` page slots; every group aliases the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_under_test.memory.specs import AttentionLayerSpec, LayerSpec, StateLayerSpec, cdiv


@dataclass(frozen=True)
class CacheGroup:
    group_id: int
    spec: LayerSpec
    layer_names: tuple[str, ...]

    @property
    def is_attention(self) -> bool:
        return isinstance(self.spec, AttentionLayerSpec)

    @property
    def is_state(self) -> bool:
        return isinstance(self.spec, StateLayerSpec)


def group_layers(specs: dict[str, LayerSpec]) -> tuple[tuple[CacheGroup, ...], int]:
    """(groups, group_size): group_size is the number of page slots in one block."""
    if not specs:
        raise ValueError("the model has no layer that keeps cache in the pool")
    buckets: dict[LayerSpec, list[str]] = {}
    for name, spec in specs.items():
        buckets.setdefault(spec, []).append(name)
    sizes = [len(v) for v in buckets.values()]
    group_size = min(sizes)
    if max(sizes) < min(sizes) * 1.5:
        group_size = max(sizes)
    groups: list[CacheGroup] = []
    for spec, names in buckets.items():
        num_groups = cdiv(len(names), group_size)
        for i in range(num_groups):
            groups.append(CacheGroup(group_id=len(groups), spec=spec, layer_names=tuple(names[i::num_groups])))
    return tuple(groups), group_size
