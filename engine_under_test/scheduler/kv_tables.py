"""One cache group's per-request block tables (vLLM 0.33 `single_type_kv_cache_manager` semantics).

Contract, the same for every table kind (the KV manager drives them in this order each step):

    n = table.num_blocks_to_allocate(request_id, num_slot_tokens, num_main_tokens)
    table.remove_skipped(request_id, num_processed_tokens, allocator)   # before the check
    table.allocate(request_id, num_slot_tokens, num_main_tokens, allocator)
    table.pop(request_id) -> the live block ids, to free (the request finished or was preempted)

`num_slot_tokens` counts the lookahead slots (capped at max_model_len), `num_main_tokens` does
not (the target model's tokens). `num_blocks_to_allocate` may be negative for an align-mode
state table that holds more than this step needs (vLLM sums it as is). `block_ids` is what the
scheduler output hands the runtime; `live_block_ids` every block the request owns.

- `AttentionTable`: block i holds positions i*block_size ..; grows to cdiv(slots, block_size).
- `StateSlots`: a fixed number of state slots (1 + k; vLLM's mamba "none" mode, whose block is
  max_model_len tokens long, so cdiv(tokens + k * block_size, block_size) = 1 + k).
- `AlignStateTable`: vLLM's MambaManager in "align" mode (prefix caching on a hybrid model). The
  table is position-indexed: entry i is the state after block i, cdiv(main tokens, block_size)
  + k entries. Entries behind the running state are nulled and their blocks freed
  (remove_skipped: every block before (processed - 1) // block_size, and the state block of two
  allocations ago); a request past its first allocation gets at most one new block per step
  (the next state), its first allocation at most 1 + k. Leading entries a prefill chunk jumps
  over are null from the start; scratch blocks that fall behind are moved to the table's end.
  A running request thus holds 1 + k live state blocks, 2 + k in the step that crosses a block
  boundary. Not modelled (unused by the reference engine's models and workloads): prefix-cache
  hits (partial-hit copy-on-write) and prefill checkpoint blocks (num_prefill_checkpoint_blocks
  is 0 for these GDN layers).
"""

from __future__ import annotations

from engine_under_test.block_allocator import BlockAllocator
from engine_under_test.memory.specs import cdiv


class AttentionTable:
    def __init__(self, block_size_tokens: int):
        self.block_size_tokens = block_size_tokens
        self._tables: dict[str, list[int]] = {}

    def num_blocks_to_allocate(self, request_id: str, num_slot_tokens: int, num_main_tokens: int) -> int:
        return max(cdiv(num_slot_tokens, self.block_size_tokens) - len(self._tables.get(request_id, ())), 0)

    def remove_skipped(self, request_id: str, num_processed_tokens: int, allocator: BlockAllocator) -> None:
        """Full attention keeps every block until the request ends."""

    def allocate(self, request_id: str, num_slot_tokens: int, num_main_tokens: int, allocator: BlockAllocator) -> None:
        table = self._tables.setdefault(request_id, [])
        n = self.num_blocks_to_allocate(request_id, num_slot_tokens, num_main_tokens)
        if n:
            table.extend(allocator.allocate(n))

    def block_ids(self, request_id: str) -> tuple[int, ...]:
        return tuple(self._tables.get(request_id, ()))

    def live_block_ids(self, request_id: str) -> list[int]:
        return list(self._tables.get(request_id, ()))

    def request_ids(self) -> list[str]:
        return list(self._tables)

    def pop(self, request_id: str) -> list[int]:
        return self._tables.pop(request_id, [])


class StateSlots(AttentionTable):
    def __init__(self, num_slots: int):
        super().__init__(block_size_tokens=0)
        self.num_slots = num_slots

    def num_blocks_to_allocate(self, request_id: str, num_slot_tokens: int, num_main_tokens: int) -> int:
        return max(self.num_slots - len(self._tables.get(request_id, ())), 0)


class AlignStateTable:
    def __init__(self, block_size_tokens: int, num_speculative_blocks: int, prefill_checkpoints: bool = False):
        self.block_size_tokens = block_size_tokens
        self.num_speculative_blocks = num_speculative_blocks
        self.prefill_checkpoints = prefill_checkpoints     # the GDN prefill kernel writes one checkpoint block
        self._tables: dict[str, list[int | None]] = {}      # None: a null entry (vLLM's null block)
        self._allocated: set[str] = set()                   # past the first allocation
        self._last_state_index: dict[str, int] = {}         # the state block of the previous allocation
        self._num_retired: dict[str, int] = {}              # entries before this are already nulled

    def _num_required(self, num_main_tokens: int) -> int:
        # lookahead slots are not counted: the draft models have no state layers
        return cdiv(num_main_tokens, self.block_size_tokens) + self.num_speculative_blocks

    def _cap(self, request_id: str) -> int:
        return 1 + (0 if request_id in self._allocated else self.num_speculative_blocks)

    def _checkpoint_block(self, request_id: str, query_start: int, query_end: int, prefill_end: int) -> int:
        """1 when this chunk writes an internal prefill checkpoint into a block of its own (vLLM
        MambaManager._needs_internal_checkpoint with hash block = state block = checkpoint grid)."""
        if not self.prefill_checkpoints or query_end < prefill_end:
            return 0
        bs = self.block_size_tokens
        checkpoint = max((query_end - 1) // bs * bs, 0)
        valid = (query_start % bs == 0 and cdiv(query_end, bs) - 2 > (query_start - 1) // bs
                 and query_start + bs <= checkpoint and query_start < checkpoint < query_end
                 and (checkpoint - query_start) % bs == 0)
        idx = cdiv(query_end, bs) - 2
        table = self._tables.get(request_id, [])
        return int(valid and idx >= 0 and (idx >= len(table) or table[idx] is None or (
            request_id in self._allocated and idx >= len(table) - self.num_speculative_blocks)))

    def num_blocks_to_allocate(self, request_id: str, num_slot_tokens: int, num_main_tokens: int,
                               query_start: int = 0, prefill_end: int = 0) -> int:
        n = self._num_required(num_main_tokens) - len(self._tables.get(request_id, ()))
        ckpt = self._checkpoint_block(request_id, query_start, num_main_tokens, prefill_end)
        return min(n, self._cap(request_id) + ckpt) if n > 0 else n

    def remove_skipped(self, request_id: str, num_processed_tokens: int, allocator: BlockAllocator) -> None:
        table = self._tables.get(request_id)
        if table is None:
            return
        bs = self.block_size_tokens
        num_skipped_tokens = num_processed_tokens - 1
        if num_skipped_tokens > 0:
            first = self._num_retired.get(request_id, 0)
            last = min(num_skipped_tokens // bs, len(table))
            if first < last:
                freed = [table[i] for i in range(last - 1, first - 1, -1) if table[i] is not None]
                for i in range(first, last):
                    table[i] = None
                allocator.free(freed)
                self._num_retired[request_id] = last
        last_state = self._last_state_index.get(request_id)
        if last_state is not None and last_state < cdiv(num_processed_tokens, bs) - 1:
            block = table[last_state]
            if block is not None:
                allocator.free([block])
                table[last_state] = None

    def allocate(self, request_id: str, num_slot_tokens: int, num_main_tokens: int, allocator: BlockAllocator,
                 query_start: int = 0, prefill_end: int = 0) -> None:
        ckpt = self._checkpoint_block(request_id, query_start, num_main_tokens, prefill_end)
        table = self._tables.setdefault(request_id, [])
        required = self._num_required(num_main_tokens)
        was_allocated, cap = request_id in self._allocated, self._cap(request_id) + ckpt
        self._allocated.add(request_id)
        if required <= len(table) and not ckpt:
            return
        nsb = self.num_speculative_blocks
        prev = len(table)
        if was_allocated:
            self._last_state_index[request_id] = prev - 1 - nsb    # the running state sits before the k scratch blocks
        num_skipped = required - nsb - 1
        table.extend([None] * max(num_skipped - ckpt - prev, 0))   # the checkpoint block is no null entry
        if was_allocated:
            for i in range(prev - nsb, min(prev, num_skipped - ckpt)):      # scratch blocks left behind move to the end
                table.append(table[i])
                table[i] = None
        n = required - len(table)
        if n > cap:
            raise RuntimeError(f"align state table of {request_id} asked for {n} blocks")  # an engine bug
        table.extend(allocator.allocate(max(n, 0)))

    def block_ids(self, request_id: str) -> tuple[int, ...]:
        """The live state blocks in table order (the runtime does not run align mode)."""
        return tuple(self.live_block_ids(request_id))

    def live_block_ids(self, request_id: str) -> list[int]:
        return [b for b in self._tables.get(request_id, ()) if b is not None]

    def request_ids(self) -> list[str]:
        return list(self._tables)

    def pop(self, request_id: str) -> list[int]:
        live = self.live_block_ids(request_id)
        self._tables.pop(request_id, None)
        self._allocated.discard(request_id)
        self._last_state_index.pop(request_id, None)
        self._num_retired.pop(request_id, None)
        return live
