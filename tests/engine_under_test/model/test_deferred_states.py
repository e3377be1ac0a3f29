"""DeferredStates (model/deferred_states.py): the kept inputs' buffers are allocated once at
max_num_seqs rows and reused by every later pass at any size (the fixed addresses a CUDA graph
captures), a pass is forgotten at `begin`, a layer that does not fit the first pass's buffers or
a pass larger than max_num_seqs is refused, and a pass that deferred nothing commits nothing."""

from __future__ import annotations

import pytest
import torch

from engine_under_test.model.deferred_states import DeferredStates

CPU = torch.device("cpu")
LAYER = (9, 2, 16, 4, 16, torch.float32, CPU)      # L, Hk, Dk, Hv, Dv, dtype, device


def _pass(deferred: DeferredStates, N: int, num_layers: int) -> list:
    deferred.begin()
    kept = []
    for _ in range(num_layers):
        keep = deferred.keep(N, *LAYER)
        deferred.record(keep, torch.empty(0), None, torch.empty(0), torch.empty(0), torch.empty(0))
        kept.append(keep)
    return kept


def test_buffers_are_allocated_once_and_reused_at_every_size():
    deferred = DeferredStates(max_num_seqs=8)
    first = _pass(deferred, 8, 3)
    assert deferred.num_layers == 3
    size = deferred.num_bytes
    assert size == 3 * 8 * 9 * (2 * 16 + 4 * 16 + 2 * 4) * 4
    again = _pass(deferred, 2, 3)
    assert deferred.num_bytes == size and deferred.num_layers == 3
    for a, b in zip(first, again):
        assert b.k.shape[0] == 2 and b.k.data_ptr() == a.k.data_ptr() and b.beta.data_ptr() == a.beta.data_ptr()


def test_conv_inputs_are_kept_when_asked():
    deferred = DeferredStates(max_num_seqs=2)
    deferred.begin()
    keep = deferred.keep(2, *LAYER, conv_dim=24)
    assert tuple(keep.x.shape) == (2, 9, 24) and keep.x.dtype == torch.float32
    assert deferred.num_bytes == 2 * 9 * (2 * 16 + 4 * 16 + 2 * 4 + 24) * 4
    deferred.begin()
    with pytest.raises(ValueError, match="does not fit"):
        deferred.keep(2, *LAYER)                    # the first pass kept conv inputs, this one does not


def test_a_layer_that_does_not_fit_or_a_pass_too_large_is_refused():
    deferred = DeferredStates(max_num_seqs=4)
    _pass(deferred, 4, 1)
    deferred.begin()
    with pytest.raises(ValueError, match="does not fit"):
        deferred.keep(4, 5, 2, 16, 4, 16, torch.float32, CPU)
    with pytest.raises(ValueError, match="buffers for 4"):
        deferred.keep(5, *LAYER)


def test_a_pass_that_deferred_nothing_commits_nothing():
    deferred = DeferredStates(max_num_seqs=4)
    _pass(deferred, 4, 2)
    deferred.begin()                 # the torch path: layers save every position, record nothing
    assert deferred.num_layers == 0
    deferred.commit(torch.zeros(4, dtype=torch.long))     # no kernel (would need Triton), no error
