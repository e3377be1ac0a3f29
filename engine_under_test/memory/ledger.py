"""The memory ledger: every allocation the engine makes for a config, by category, in bytes.

Contract: `Ledger.categories` maps each category to bytes: the pool's (attention_kv,
recurrent_state, draft_kv, and the padding / unused / unassigned bytes of the ONE pool
allocation, together summing to the pool's bytes) and
what lives beside the pool (weights, activations, workspace). `outside_bound` lists the
categories the operator's flag does not bound; the planner keeps it empty by construction
(with kv_cache_memory_bytes the flag bounds the pool, and nothing cache-like is allocated
beside it; with gpu_memory_utilization every category is inside the bound).
"""

from __future__ import annotations

from dataclasses import dataclass, field

POOL_CATEGORIES = ("attention_kv", "recurrent_state", "draft_kv")
POOL_OVERHEAD_CATEGORIES = ("padding", "unused", "unassigned")   # pool bytes no layer's data fills
BESIDE_POOL_CATEGORIES = ("weights", "activations", "workspace", "cuda_context")


@dataclass(frozen=True)
class Ledger:
    bound_bytes: int
    bound_kind: str                 # "kv_cache_memory_bytes" | "gpu_memory_utilization"
    categories: dict[str, int]
    outside_bound: tuple[str, ...] = field(default=())

    @property
    def pool_bytes(self) -> int:
        return sum(self.categories.get(c, 0) for c in POOL_CATEGORIES + POOL_OVERHEAD_CATEGORIES)

    @property
    def total_bytes(self) -> int:
        return sum(self.categories.values())

    @property
    def bounded_bytes(self) -> int:
        """What the bound must hold: the pool (kv_cache_memory_bytes) or everything (utilization)."""
        return self.pool_bytes if self.bound_kind == "kv_cache_memory_bytes" else self.total_bytes

    def check(self) -> None:
        """Raise if the plan breaks its own bound (an engine bug, never a user error)."""
        if self.outside_bound:
            raise RuntimeError(f"allocations outside the bound: {self.outside_bound}")
        if self.bounded_bytes > self.bound_bytes:
            raise RuntimeError(f"ledger {self.bounded_bytes} B exceeds the bound {self.bound_bytes} B: {self.categories}")
