"""`storage_on_meta`: floating-point fill tensors go to meta, bookkeeping stays on the CPU, and the ledger counts both.

Runs in the project's venv (torch only): the mode is plain torch, the SGLang pools it wraps are exercised by
test_sglang_plan.py.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from conformance.adapters.sglang.meta_storage import storage_on_meta  # noqa: E402

GIB_BYTES = 1 << 30


def test_floating_fill_tensors_are_meta_and_counted():
    with storage_on_meta() as ledger:
        kv = torch.zeros((2, 1 << 20, 8, 128), dtype=torch.bfloat16, device="cpu")
        state = torch.empty(48, 33, 48, 128, 128, dtype=torch.float32)
        default_dtype = torch.ones(4, 4)
        widened = kv.new_zeros((3, 5))
        filled = torch.full((7,), 0.5)
    for t in (kv, state, default_dtype, widened, filled):
        assert t.device.type == "meta"
    assert kv.shape == (2, 1 << 20, 8, 128) and kv.dtype == torch.bfloat16
    expected = sum(t.numel() * t.element_size() for t in (kv, state, default_dtype, widened, filled))
    assert ledger.unmaterialised_bytes == expected > 4 * GIB_BYTES
    assert ledger.num_unmaterialised_tensors == 5
    assert ledger.materialised_bytes == 0


def test_bookkeeping_stays_on_the_cpu_with_its_values():
    with storage_on_meta() as ledger:
        req_to_token = torch.zeros((33, 8205), dtype=torch.int32, device="cpu")
        free_slots = torch.arange(1, 1025, dtype=torch.int64)
        lens = torch.tensor([3, 4, 5])
        int_fill = torch.full((4,), 7)
        mask = torch.full((4,), True)
        rows = req_to_token.new_zeros((2, 2))
    for t in (req_to_token, free_slots, lens, int_fill, mask, rows):
        assert t.device.type == "cpu"
    assert int_fill.dtype == torch.int64 and mask.dtype == torch.bool and int(free_slots[-1]) == 1024
    assert ledger.num_unmaterialised_tensors == 0
    assert ledger.materialised_bytes == sum(
        t.numel() * t.element_size() for t in (req_to_token, free_slots, lens, int_fill, mask, rows))


def test_scheduler_writes_into_meta_storage_index_with_cpu_indices():
    """What SGLang does to state while scheduling: clear a slot, copy one slot to another (copy-on-write)."""
    with storage_on_meta():
        conv = torch.zeros((6, 37, 8, 32), dtype=torch.float32)
    slots = torch.tensor([2, 5])
    conv[:, slots] = 0
    conv[:, slots[:1]] = conv[:, slots[1:]]
    with pytest.raises((RuntimeError, NotImplementedError)):
        conv.sum().item()  # a decision that read stored values could not pass silently


def test_the_mode_ends_with_the_block():
    with storage_on_meta():
        pass
    assert torch.zeros(2).device.type == "cpu"
