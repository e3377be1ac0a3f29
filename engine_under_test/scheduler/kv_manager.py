"""Per-request block tables over the unified pool (vLLM 0.33 `KVCacheManager.allocate_slots`).

Contract: `allocate_slots(req, num_new_tokens, num_lookahead_tokens, admission)` gives the
request every block it needs to compute num_computed_tokens + num_new_tokens tokens plus the
lookahead slots (capped at max_model_len), in every group at once, or returns None and
allocates nothing. In vLLM's order:

1. with `admission` (a waiting request): the whole sequence (num_tokens, capped at
   max_model_len) must fit in the free blocks, counted as the first allocation would count
   it (vLLM's scheduler_reserve_full_isl gate);
2. every group frees the blocks the request no longer needs (`remove_skipped`) on the
   processed-token basis, num_computed_tokens - num_in_flight_tokens (vLLM's
   `processed_computed_tokens`): under async scheduling the computed tokens already count a step
   still executing, whose blocks (an align-mode state or prefill checkpoint block it writes) must
   outlive it; with sync scheduling nothing is in flight here - even when step 3 then fails;
3. the blocks this step needs, summed over the groups, must fit in the free blocks;
4. every group allocates them.

Each group keeps its tables as `kv_tables` describes: attention groups cdiv(tokens,
block_size) blocks; state groups 1 + k fixed slots, or in align mode (prefix caching on a
hybrid model) vLLM's position-indexed state table with 1 + k live blocks (2 + k in a step
that crosses a block boundary). `free(request_id)` returns a request's blocks to the pool.
"""

from __future__ import annotations

from engine_under_test.block_allocator import BlockAllocator
from engine_under_test.memory.specs import AttentionLayerSpec
from engine_under_test.pool import PoolLayout
from engine_under_test.scheduler.kv_tables import AlignStateTable, AttentionTable, StateSlots
from engine_under_test.scheduler.request import Request


class KVCacheManager:
    def __init__(self, layout: PoolLayout, max_model_len: int, num_state_slots: int, num_reserved_blocks: int = 1,
                 align_mode: bool = False, prefill_checkpoints: bool = False):
        """`num_state_slots`: 1 + k, or 2 + k in align mode (memory.planner.state_slots_per_sequence)."""
        self.layout = layout
        self.max_model_len = max_model_len
        self.num_state_slots = num_state_slots
        self.align_mode = align_mode
        self.allocator = BlockAllocator(layout.num_blocks, num_reserved_blocks)
        self.tables: dict[int, AttentionTable | StateSlots | AlignStateTable] = {}
        for g in layout.groups:
            if isinstance(g.spec, AttentionLayerSpec):
                self.tables[g.group_id] = AttentionTable(g.spec.block_size_tokens)
            elif align_mode:
                self.tables[g.group_id] = AlignStateTable(layout.block_size_tokens, num_state_slots - 2,
                                                         prefill_checkpoints=prefill_checkpoints)
            else:
                self.tables[g.group_id] = StateSlots(num_state_slots)

    def blocks_of(self, request_id: str) -> dict[int, tuple[int, ...]]:
        """Per group: the attention block table, or the request's state blocks."""
        return {gid: t.block_ids(request_id) for gid, t in self.tables.items()}

    def holds_blocks(self, request_id: str) -> bool:
        return any(t.live_block_ids(request_id) for t in self.tables.values())

    def _num_to_allocate(self, request_id: str, num_slot_tokens: int, num_main_tokens: int, **chunk: int) -> int:
        return sum(t.num_blocks_to_allocate(request_id, num_slot_tokens, num_main_tokens, **chunk)
                   if isinstance(t, AlignStateTable) else t.num_blocks_to_allocate(request_id, num_slot_tokens, num_main_tokens)
                   for t in self.tables.values())

    def allocate_slots(self, req: Request, num_new_tokens: int, num_lookahead_tokens: int,
                       admission: bool = False) -> dict[int, tuple[int, ...]] | None:
        rid = req.request_id
        free = self.allocator.num_free_blocks
        if admission:
            full = min(req.num_tokens, self.max_model_len)
            if self._num_to_allocate(rid, full, full) > free:
                return None
        num_computed = min(req.num_computed_tokens, self.max_model_len)
        num_processed = max(0, num_computed - req.num_in_flight_tokens)
        for t in self.tables.values():
            t.remove_skipped(rid, num_processed, self.allocator)
        num_main = num_computed + num_new_tokens
        num_slot = min(num_main + num_lookahead_tokens, self.max_model_len)
        chunk = {"query_start": num_computed, "prefill_end": max(req.num_prompt_tokens, req.num_tokens - 1)}
        if self._num_to_allocate(rid, num_slot, num_main, **chunk) > self.allocator.num_free_blocks:
            return None
        for t in self.tables.values():
            if isinstance(t, AlignStateTable):
                t.allocate(rid, num_slot, num_main, self.allocator, **chunk)
            else:                                   # NOTE: allocates only when the table grows
                t.allocate(rid, num_slot, num_main, self.allocator)
        return self.blocks_of(rid)

    def free(self, request_id: str) -> None:
        # NOTE: freed in reverse so the tail blocks are reused last (vLLM frees tail first).
        for t in self.tables.values():
            self.allocator.free(list(reversed(t.pop(request_id))))

    def check_integrity(self) -> None:
        self.allocator.check_integrity()
        owned = [b for t in self.tables.values() for rid in t.request_ids() for b in t.live_block_ids(rid)]
        assert len(owned) == len(set(owned)), "a block is owned twice"
        assert len(owned) == self.allocator.num_used_blocks, "allocator and block tables disagree"
