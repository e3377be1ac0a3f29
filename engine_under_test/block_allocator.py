"""Block ids of the unified pool: one free list for every cache group.

Contract: `can_allocate(n)` / `allocate(n) -> list[int]` / `free(ids)`. `allocate` raises
`OutOfBlocks` when fewer than n blocks are free (callers ask `can_allocate` first); it never
returns a partial list or a sentinel. Block ids 0 .. num_reserved_blocks-1 are never handed out
(block 0 is the null page that padded block-table entries point at, as vLLM's BlockPool keeps).
Freed blocks go to the back of the free list (least recently freed is reused first).
`check_integrity()` raises `AssertionError` when the free list and the owned set disagree.
"""

from __future__ import annotations

from collections import deque


class OutOfBlocks(RuntimeError):
    pass


class BlockAllocator:
    def __init__(self, num_blocks: int, num_reserved_blocks: int = 1):
        if num_blocks <= num_reserved_blocks:
            raise ValueError(f"num_blocks ({num_blocks}) must exceed num_reserved_blocks ({num_reserved_blocks})")
        self.num_blocks = num_blocks
        self.num_reserved_blocks = num_reserved_blocks
        self._free: deque[int] = deque(range(num_reserved_blocks, num_blocks))
        self._used: set[int] = set()

    @property
    def num_usable_blocks(self) -> int:
        return self.num_blocks - self.num_reserved_blocks

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return len(self._used)

    def can_allocate(self, num_blocks: int) -> bool:
        return 0 <= num_blocks <= len(self._free)

    def allocate(self, num_blocks: int) -> list[int]:
        if num_blocks < 0:
            raise ValueError(f"num_blocks must be >= 0, got {num_blocks}")
        if num_blocks > len(self._free):
            raise OutOfBlocks(f"asked for {num_blocks} blocks, {len(self._free)} free of {self.num_usable_blocks}")
        out = [self._free.popleft() for _ in range(num_blocks)]
        self._used.update(out)
        return out

    def free(self, block_ids: list[int] | tuple[int, ...]) -> None:
        for b in block_ids:
            if b not in self._used:
                raise ValueError(f"block {b} is not allocated (double free or foreign id)")
            self._used.remove(b)
            self._free.append(b)

    def check_integrity(self) -> None:
        free = set(self._free)
        assert len(free) == len(self._free), "a block is on the free list twice"
        assert not (free & self._used), f"blocks both free and used: {sorted(free & self._used)[:10]}"
        expected = set(range(self.num_reserved_blocks, self.num_blocks))
        assert free | self._used == expected, "blocks lost or foreign ids in the allocator"
