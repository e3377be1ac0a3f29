"""The in-place paged attention kernel against the gathering torch reference of the same function.

Runs on CUDA, or on a CPU under Triton's interpreter (`TRITON_INTERPRET=1`, set before triton is
first imported); skips where neither is there. Fresh random inputs per case, a shuffled block
table with its padding pointing at block 0 (poisoned with NaN: a kernel that reads past a
sequence's length fails), causal (target verify) and non-causal (drafter query block), one
and several KV splits, float32 (IEEE dots: near 1e-6) and bf16.
"""

from __future__ import annotations

import os

import pytest
import torch

from engine_under_test.model.static_batch import StaticBatch, _reference

triton = pytest.importorskip("triton")
if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs CUDA or TRITON_INTERPRET=1", allow_module_level=True)

if os.environ.get("TRITON_INTERPRET") == "1":
    # NOTE: the interpreter holds scalars as 1-element arrays, which NumPy 2 refuses to int(); its
    # tensor __index__ (loop bounds read from memory): read the one element instead
    import numpy as np
    import triton.runtime.interpreter as _interp

    _patch_tensor = _interp._patch_lang_tensor

    def _patch_lang_tensor(tensor, scope):
        _patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    _interp._patch_lang_tensor = _patch_lang_tensor

from engine_under_test.model import paged_attention_kernel as pak  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _case(seed, B, L, H, hkv, D, bs, ctx, dtype, causal):
    g = torch.Generator().manual_seed(seed)
    num_blocks = 1 + B * (-(-(max(ctx) + L) // bs)) + 3
    k_cache = torch.randn(num_blocks, bs, hkv, D, generator=g).to(dtype)
    v_cache = torch.randn(num_blocks, bs, hkv, D, generator=g).to(dtype)
    k_cache[0], v_cache[0] = float("nan"), float("nan")          # the null block: never read unmasked
    W = -(-(max(ctx) + L) // bs) + 1
    ids = (torch.randperm(num_blocks - 1, generator=g) + 1).tolist()
    table = torch.zeros(B, W, dtype=torch.long)
    seq_lens, pos = [], []
    for b in range(B):
        n = -(-(ctx[b] + L) // bs)
        table[b, :n] = torch.tensor([ids.pop() for _ in range(n)])
        seq_lens.append(ctx[b] + L)
        pos.extend(range(ctx[b], ctx[b] + L))
    q = torch.randn(B * L, H, D, generator=g).to(dtype)
    to = lambda t: t.to(DEVICE)  # noqa: E731
    batch = StaticBatch(B, L, bs, causal, to(torch.tensor(pos)), to(torch.tensor(seq_lens)), {0: to(table)}, {})
    return to(q), to(k_cache), to(v_cache), batch


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("B,L,H,hkv,D,bs,ctx,dtype,tol", [
    (1, 9, 8, 2, 64, 32, [150], torch.float32, 1e-5),                   # many splits (one sequence)
    (3, 5, 4, 2, 32, 16, [0, 40, 97], torch.float32, 1e-5),
    (2, 9, 8, 2, 64, 64, [70, 3], torch.bfloat16, 2e-2),
    (2, 1, 8, 2, 64, 16, [33, 5], torch.float32, 1e-5),                 # 4 heads share a program (decode)
])
def test_kernel_matches_gathering_reference(B, L, H, hkv, D, bs, ctx, dtype, tol, causal):
    if DEVICE == "cpu" and dtype == torch.bfloat16:
        pytest.skip("Triton's interpreter computes bf16 dots wrongly (checked on CUDA)")
    q, k_cache, v_cache, batch = _case(B + L, B, L, H, hkv, D, bs, ctx, dtype, causal)
    table = batch.block_tables_t[0]
    got = pak.paged_attention_in_place(q, k_cache, v_cache, table, batch.seq_lens_t,
                                       batch.positions if causal else None, L, D ** -0.5, causal)
    # the reference gathers every table entry, padding included: give it a clean null block
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    k_ref[0], v_ref[0] = 0, 0
    want = _reference(q.float(), batch, k_ref.float(), v_ref.float(), table, D ** -0.5)
    err = (got.float() - want).norm() / want.norm()
    assert torch.isfinite(got.float()).all()
    assert err < tol, f"relative error {err:.2e}"


def test_split_count_fills_the_chip_and_stays_a_power_of_two():
    assert pak.num_splits_for(1, 8) == pak.MAX_SPLITS
    assert pak.num_splits_for(32, 8) == 1
    assert pak.num_splits_for(8, 8) == 4
    assert pak.num_splits_for(200, 2) == 1
    for b in range(1, 70):
        n = pak.num_splits_for(b, 2)
        assert n & (n - 1) == 0


def test_heads_per_program_keep_a_16_row_tile():
    assert pak.heads_per_program(8, 2, 9) == 1       # 2b verify: 9 rows per head
    assert pak.heads_per_program(8, 2, 9, 32) == 2   # the engine's 32-row tile: two heads share a KV read
    assert pak.heads_per_program(8, 2, 1) == 4       # plain decode: the 4 heads of a KV head
    assert pak.heads_per_program(16, 2, 2) == 8
    assert pak.heads_per_program(6, 2, 5) == 3
