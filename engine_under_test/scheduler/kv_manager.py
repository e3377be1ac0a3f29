"""Per-request block tables over the unified pool (vLLM `KVCacheManager.allocate_slots` semantics).

Contract: `allocate_slots(req, num_new_tokens, num_lookahead_tokens, admission)` gives the
request every block it needs to compute num_computed_tokens + num_new_tokens tokens plus the
lookahead slots (capped at max_model_len), in every group at once, or returns None and changes
nothing. Attention groups need cdiv(tokens, block_size) blocks; each state group needs its
fixed state slots (1 + k, or 2 + k in align mode) once. With `admission` (a waiting request),
the whole prompt must also fit (vLLM's scheduler_reserve_full_isl admission gate).
NOTE: align mode keeps 2 + k resident state slots per sequence; vLLM lays them out along a
position-indexed table with retired entries nulled. The counts agree once a request runs; the
admission gate of vLLM counts the whole position-indexed table (see the case notes).
"""

from __future__ import annotations

from engine_under_test.block_allocator import BlockAllocator
from engine_under_test.memory.specs import AttentionLayerSpec, cdiv
from engine_under_test.pool import PoolLayout
from engine_under_test.scheduler.request import Request


class KVCacheManager:
    def __init__(self, layout: PoolLayout, max_model_len: int, num_state_slots: int, num_reserved_blocks: int = 1):
        self.layout = layout
        self.max_model_len = max_model_len
        self.num_state_slots = num_state_slots
        self.allocator = BlockAllocator(layout.num_blocks, num_reserved_blocks)
        self._blocks: dict[str, dict[int, list[int]]] = {}

    def blocks_of(self, request_id: str) -> dict[int, list[int]]:
        return self._blocks.get(request_id, {})

    def _needed(self, request_id: str, num_tokens: int) -> dict[int, int]:
        held = self._blocks.get(request_id, {})
        need: dict[int, int] = {}
        for g in self.layout.groups:
            have = len(held.get(g.group_id, ()))
            if isinstance(g.spec, AttentionLayerSpec):
                need[g.group_id] = max(cdiv(num_tokens, g.spec.block_size_tokens) - have, 0)
            else:
                need[g.group_id] = max(self.num_state_slots - have, 0)
        return need

    def allocate_slots(self, req: Request, num_new_tokens: int, num_lookahead_tokens: int,
                       admission: bool = False) -> dict[int, list[int]] | None:
        if admission:
            full = min(req.num_tokens, self.max_model_len)
            if not self.allocator.can_allocate(sum(self._needed(req.request_id, full).values())):
                return None
        num_tokens = min(req.num_computed_tokens + num_new_tokens + num_lookahead_tokens, self.max_model_len)
        need = self._needed(req.request_id, num_tokens)
        if not self.allocator.can_allocate(sum(need.values())):
            return None
        held = self._blocks.setdefault(req.request_id, {g.group_id: [] for g in self.layout.groups})
        for gid, n in need.items():
            if n:
                held[gid].extend(self.allocator.allocate(n))
        return held

    def free(self, request_id: str) -> None:
        held = self._blocks.pop(request_id, {})
        # NOTE: freed in reverse so the tail blocks are reused last (vLLM frees tail first).
        for ids in held.values():
            self.allocator.free(list(reversed(ids)))

    def check_integrity(self) -> None:
        self.allocator.check_integrity()
        owned = [b for groups in self._blocks.values() for ids in groups.values() for b in ids]
        assert len(owned) == len(set(owned)), "a block is owned twice"
        assert len(owned) == self.allocator.num_used_blocks, "allocator and block tables disagree"
