"""The block allocator's contract at its edges (engine_under_test.block_allocator).

- construction: more blocks than reserved ones, else `ValueError`; one reserved block by default
  (block 0, the null page), never handed out;
- `can_allocate(n)` is exactly 0 <= n <= free; `allocate(n)` returns n ids in free-list order
  (lowest first on a fresh allocator), raises `ValueError` for n < 0 and `OutOfBlocks` past the free
  count without touching the free list; freed blocks go to the back of the free list;
- `free` refuses an id that is not allocated (double free, foreign or reserved id);
- the counters (usable, free, used) and `check_integrity` catch a corrupted free list or owned set.
"""

from __future__ import annotations

import pytest

from engine_under_test.block_allocator import BlockAllocator, OutOfBlocks


def test_construction_needs_more_blocks_than_reserved():
    with pytest.raises(ValueError, match=r"num_blocks \(3\) must exceed num_reserved_blocks \(3\)"):
        BlockAllocator(3, num_reserved_blocks=3)
    with pytest.raises(ValueError):
        BlockAllocator(1)
    BlockAllocator(2)   # one usable block beside the null block is enough


def test_block_zero_is_reserved_by_default_and_counters_add_up():
    a = BlockAllocator(5)
    assert (a.num_blocks, a.num_reserved_blocks, a.num_usable_blocks) == (5, 1, 4)
    assert (a.num_free_blocks, a.num_used_blocks) == (4, 0)
    assert a.allocate(4) == [1, 2, 3, 4]
    assert (a.num_free_blocks, a.num_used_blocks) == (0, 4)
    a.check_integrity()


def test_can_allocate_is_exactly_zero_to_free():
    a = BlockAllocator(4, num_reserved_blocks=2)
    assert [a.can_allocate(n) for n in (-1, 0, 1, 2, 3)] == [False, True, True, True, False]


def test_allocate_refuses_negative_and_too_many_without_side_effects():
    a = BlockAllocator(4)
    with pytest.raises(ValueError, match="num_blocks must be >= 0, got -1"):
        a.allocate(-1)
    with pytest.raises(OutOfBlocks, match="asked for 4 blocks, 3 free of 3"):
        a.allocate(4)
    assert a.num_free_blocks == 3 and a.allocate(0) == [] and a.allocate(3) == [1, 2, 3]


def test_freed_blocks_go_to_the_back_of_the_free_list():
    a = BlockAllocator(6)
    first = a.allocate(2)                 # [1, 2]; free list 3, 4, 5
    a.free(list(reversed(first)))         # free list 3, 4, 5, 2, 1
    assert a.allocate(5) == [3, 4, 5, 2, 1]
    a.check_integrity()


def test_free_refuses_what_is_not_allocated():
    a = BlockAllocator(4)
    ids = a.allocate(2)
    a.free(ids[:1])
    for bad in (ids[0], 0, 99):
        with pytest.raises(ValueError, match=f"block {bad} is not allocated"):
            a.free([bad])
    assert a.num_used_blocks == 1 and a.num_free_blocks == 2
    a.check_integrity()


@pytest.mark.parametrize("corrupt, message", [
    (lambda a: a._free.append(a._free[0]), "a block is on the free list twice"),
    (lambda a: a._used.add(a._free[0]), "blocks both free and used: [2]"),
    (lambda a: a._free.pop(), "blocks lost or foreign ids in the allocator"),
    (lambda a: a._used.add(0), "blocks lost or foreign ids in the allocator"),
])
def test_check_integrity_catches_corruption(corrupt, message):
    a = BlockAllocator(5)
    a.allocate(1)
    a.check_integrity()
    corrupt(a)
    with pytest.raises(AssertionError) as exc:
        a.check_integrity()
    assert str(exc.value).splitlines()[0] == message    # the whole first line (pytest may append its own)


def test_integrity_message_lists_at_most_ten_blocks():
    a = BlockAllocator(20)
    a._used.update(list(a._free)[:12])
    with pytest.raises(AssertionError) as exc:
        a.check_integrity()
    assert str(exc.value).splitlines()[0] == f"blocks both free and used: {list(range(1, 11))}"
