"""The deferred verify pass and its commit (model/gdn_snapshots.py `keep=` and `gdn_commit`, and the
conv kernel's `keep_x` and `conv_commit`) against the snapshot pass that writes every position's
state, on fresh random inputs.

For accepted lengths covering 0 .. L - 1 (one per sequence, and every sequence at each length):
the deferred pass returns the snapshot pass's outputs bit for bit and writes no state; the commit
then writes into block dst[n, m] the state the snapshot pass wrote there, bit for bit, and no other
block changes (a NaN-poisoned pool, so a stray store shows). A fresh sequence (zero initial state)
and a destination equal to its source slot are among them. float32 on CUDA or under Triton's
interpreter (`TRITON_INTERPRET=1` on a CPU); bf16 and the layer's raw gates on CUDA only.
"""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("triton")
if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs CUDA or TRITON_INTERPRET=1", allow_module_level=True)

from engine_under_test.model.kept_inputs import KeptInputs  # noqa: E402
from engine_under_test.model.gdn_snapshots import gdn_commit, gdn_snapshots  # noqa: E402
from tests.engine_under_test.model.triton_interpreter import interpret_snapshot_kernels  # noqa: E402

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
CASES = [(torch.float32, False)] + ([(torch.bfloat16, False), (torch.float32, True), (torch.bfloat16, True)]
                                    if CUDA else [])
# (sequences, positions, key heads, value heads, key dim, value dim): the 2b shapes' heads on CUDA
SHAPE = (3, 9, 16, 16, 128, 128) if CUDA else (3, 5, 2, 4, 16, 16)


@pytest.fixture(autouse=True)
def kernels_on_cpu(monkeypatch):
    if not CUDA:
        interpret_snapshot_kernels(monkeypatch)


def _world(dtype, raw_gates: bool, seed: int):
    G, L, hk, hv, dk, dv = SHAPE
    gen = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=gen)  # noqa: E731
    q, k, v = (x.to(DEVICE, dtype) for x in (r(G, L, hk, dk), r(G, L, hk, dk), r(G, L, hv, dv)))
    if raw_gates:            # the layer's a / b projections; the kernel computes g and beta
        g, beta = (4 * r(G, L, hv)).to(DEVICE, dtype), r(G, L, hv).to(DEVICE, dtype)
        gates = (r(hv).to(DEVICE, dtype), r(hv).to(DEVICE, dtype))
    else:
        g = -torch.rand(G, L, hv, generator=gen).to(DEVICE)
        beta = torch.rand(G, L, hv, generator=gen).to(DEVICE, dtype)
        gates = None
    num_blocks = 1 + G * (L + 1)
    pool = torch.full((num_blocks, hv, dv, dk), float("nan"), device=DEVICE)
    src = torch.tensor([1, 2, 3], device=DEVICE)
    pool[1], pool[2] = r(hv, dv, dk).to(DEVICE), r(hv, dv, dk).to(DEVICE)       # sequence 2 is fresh
    fresh = torch.tensor([False, False, True], device=DEVICE)
    dst = torch.tensor([[1 + G + n * L + t for t in range(L)] for n in range(G)], device=DEVICE)
    dst[0, 0] = 1                                                                # slot 0 of sequence 0 is its source
    return (q, k, v, g, beta), gates, pool, src, fresh, dst


def _accepted_cases(G: int, L: int) -> list[list[int]]:
    mixed = [[(n * 3 + j) % L for n in range(G)] for j in range(L)]
    return mixed + [[m] * G for m in (0, L - 1)]


@pytest.mark.parametrize(("dtype", "raw_gates"), CASES)
def test_commit_writes_the_snapshot_passes_accepted_state(dtype, raw_gates):
    G, L, hk, hv, dk, dv = SHAPE
    inputs, gates, pool, src, fresh, dst = _world(dtype, raw_gates, seed=3)
    save = torch.ones(G, L, dtype=torch.int32, device=DEVICE)
    every = pool.clone()
    o_ref = gdn_snapshots(*inputs, every, src, fresh, dst, save, gates=gates)
    for accepted in _accepted_cases(G, L):
        deferred = pool.clone()
        keep = KeptInputs.empty(G, L, hk, dk, hv, dv, dtype, torch.device(DEVICE))
        o = gdn_snapshots(*inputs, deferred, src, fresh, dst, save, gates=gates, keep=keep)
        assert torch.equal(o, o_ref), accepted
        torch.testing.assert_close(deferred, pool, rtol=0, atol=0, equal_nan=True)   # no state written
        gdn_commit(keep, deferred, src, fresh, dst, torch.tensor(accepted, device=DEVICE))
        written = {int(dst[n, m]) for n, m in enumerate(accepted)}
        for b in range(pool.shape[0]):
            want = every[b] if b in written else pool[b]
            torch.testing.assert_close(deferred[b], want, rtol=0, atol=0, equal_nan=True, msg=f"{accepted} block {b}")


def test_kept_inputs_that_do_not_fit_the_pass_are_refused():
    G, L, hk, hv, dk, dv = SHAPE
    inputs, _, pool, src, fresh, dst = _world(torch.float32, False, seed=5)
    keep = KeptInputs.empty(G, L - 1, hk, dk, hv, dv, torch.float32, torch.device(DEVICE))
    with pytest.raises(ValueError, match="kept inputs"):
        gdn_snapshots(*inputs, pool, src, fresh, dst, torch.ones(G, L, dtype=torch.int32, device=DEVICE), keep=keep)


@pytest.mark.parametrize("dtype", [c[0] for c in CASES if not c[1]])
def test_conv_commit_writes_the_snapshot_passes_accepted_conv_state(dtype):
    """The conv kernel's deferred pass (`keep_x`) returns the snapshot pass's outputs and writes no
    state; `conv_commit` then writes into rows 0..2 of block dst[n, m] what the snapshot pass wrote
    there, bit for bit, for every accepted length (m < 2 reads rows of the initial state), and
    nothing else (rows 3.. of every block and every other block untouched)."""
    from engine_under_test.model.gdn_conv_kernel import conv_commit, conv_snapshots

    G, L = SHAPE[0], SHAPE[1]
    C, rows = 48, 3 + (L - 1)                       # the pool's conv rows: the state, widened by k
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(G, L, C + 16, generator=gen).to(DEVICE, dtype)[..., 8:8 + C]    # a column view
    weight = torch.randn(C, 4, generator=gen).to(DEVICE, dtype)
    num_blocks = 1 + G * (L + 1)
    pool = torch.full((num_blocks, C, rows), float("nan"), device=DEVICE, dtype=dtype)
    pool[1, :, :3] = torch.randn(C, 3, generator=gen).to(DEVICE, dtype)
    pool[2, :, :3] = torch.randn(C, 3, generator=gen).to(DEVICE, dtype)
    src = torch.tensor([1, 2, 3], device=DEVICE)
    fresh = torch.tensor([False, False, True], device=DEVICE)
    dst = torch.tensor([[1 + G + n * L + t for t in range(L)] for n in range(G)], device=DEVICE)
    dst[1, 0] = 2                                   # slot 0 of sequence 1 is its source
    save = torch.ones(G, L, dtype=torch.int32, device=DEVICE)
    every = pool.clone()
    out_ref = conv_snapshots(x, weight, every[:, :, :3], src, fresh, dst, save)
    for accepted in _accepted_cases(G, L):
        deferred = pool.clone()
        keep_x = torch.empty(G, L, C, dtype=dtype, device=DEVICE)
        out = conv_snapshots(x, weight, deferred[:, :, :3], src, fresh, dst, save, keep_x=keep_x)
        assert torch.equal(out, out_ref), accepted
        torch.testing.assert_close(deferred, pool, rtol=0, atol=0, equal_nan=True)    # no state written
        conv_commit(keep_x, deferred[:, :, :3], src, fresh, dst, torch.tensor(accepted, device=DEVICE))
        written = {int(dst[n, m]) for n, m in enumerate(accepted)}
        for b in range(num_blocks):
            want = pool[b].clone()
            if b in written:
                want[:, :3] = every[b, :, :3]
            torch.testing.assert_close(deferred[b], want, rtol=0, atol=0, equal_nan=True, msg=f"{accepted} block {b}")
