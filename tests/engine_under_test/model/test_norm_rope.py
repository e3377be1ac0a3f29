"""The attention layers' norm + rope + K/V write kernel (model/norm_rope.py) against the modules'
torch code, on fresh random inputs: float32 on CUDA or under Triton's interpreter
(`TRITON_INTERPRET=1` on a CPU), bf16 on CUDA only.

Shapes as the layers call it: the target's (zero-centered norms, rope over a quarter of the head,
q and its gate interleaved per head in one projection) and the drafter's (plain RMSNorm, rope
over the whole head, and its context pass that writes K/V only); q, k, v column views of one
projection; the cache a strided view of a NaN-poisoned pool, so a store outside the tokens'
(block, row) pairs shows.
"""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("triton")
if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs CUDA or TRITON_INTERPRET=1", allow_module_level=True)

from engine_under_test.model import norm_rope  # noqa: E402
from engine_under_test.model.norm import RMSNorm, ZeroCenteredRMSNorm  # noqa: E402
from engine_under_test.model.rope import RotaryEmbedding  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32] + ([torch.bfloat16] if torch.cuda.is_available() else [])
NUM_BLOCKS, BLOCK_TOKENS = 6, 8


@pytest.fixture(autouse=True)
def kernel_on_cpu(monkeypatch):
    if not torch.cuda.is_available():          # the interpreter runs CPU tensors
        monkeypatch.setattr(norm_rope, "_use_kernel", lambda *ts: all(t.stride(-1) == 1 for t in ts))


def _norm(cls, dim, dtype, gen):
    norm = cls(dim, 1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(dim, generator=gen) * 0.5 + (0 if cls is ZeroCenteredRMSNorm else 1))
    return norm.to(DEVICE, dtype)


def _case(cls, H, Hkv, D, rotary_dim, T, dtype, seed, gated_q):
    gen = torch.Generator().manual_seed(seed)
    q_width = H * D * (2 if gated_q else 1)
    proj = torch.randn(T, q_width + 2 * Hkv * D, generator=gen).to(DEVICE, dtype)      # one fused product
    q_gate = proj[:, :q_width].view(T, H, -1)
    q = q_gate[..., :D] if gated_q else q_gate                                          # strided heads
    k = proj[:, q_width:q_width + Hkv * D].view(T, Hkv, D)
    v = proj[:, q_width + Hkv * D:].view(T, Hkv, D)
    rope = RotaryEmbedding(rotary_dim, 10000.0)
    positions = torch.randint(0, 4000, (T,), generator=gen).to(DEVICE)
    cos_sin = rope.cos_sin(positions, dtype)
    flat = torch.randperm(NUM_BLOCKS * BLOCK_TOKENS, generator=gen)[:T].to(DEVICE)
    slots = (flat // BLOCK_TOKENS, flat % BLOCK_TOKENS)
    norms = _norm(cls, D, dtype, gen), _norm(cls, D, dtype, gen)
    return q, k, v, norms, rope, cos_sin, slots


def _pool(Hkv, D, dtype):
    """Two caches [NUM_BLOCKS, BLOCK_TOKENS, Hkv, D]: strided views (a spare head) of NaN pools."""
    return [torch.full((NUM_BLOCKS, BLOCK_TOKENS, Hkv + 1, D), float("nan"), dtype=dtype, device=DEVICE)[:, :, :Hkv]
            for _ in range(2)]


def _reference(q, k, v, norms, rope, cos_sin, slots, caches):
    q_norm, k_norm = norms
    if q is not None:
        q = rope.apply(q_norm.torch_forward(q), *cos_sin)
    norm_rope.write_kv(*caches, slots, rope.apply(k_norm.torch_forward(k), *cos_sin), v)
    return q


def _close(got, want, dtype):
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    err = (got.float() - want.float()).norm() / want.float().norm()
    assert torch.isfinite(got.float()).all() and err < tol, f"relative error {err:.2e}"


def _same_pool(got, want, dtype):
    written = ~torch.isnan(want)
    assert torch.equal(torch.isnan(got), ~written), "a store outside the tokens' rows, or one missing"
    _close(got[written], want[written], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cls,H,Hkv,D,rotary_dim,gated_q", [
    (ZeroCenteredRMSNorm, 4, 2, 64, 16, True),       # the target: partial rope, q and gate per head
    (RMSNorm, 4, 2, 32, 32, False),                  # the drafter: whole-head rope
    (ZeroCenteredRMSNorm, 3, 1, 40, 24, True),       # a head that is not a power of two
])
def test_queries_and_written_keys_match_the_modules(cls, H, Hkv, D, rotary_dim, gated_q, dtype):
    q, k, v, norms, rope, cos_sin, slots = _case(cls, H, Hkv, D, rotary_dim, 13, dtype, D + H, gated_q)
    want_caches, got_caches = _pool(Hkv, D, dtype), _pool(Hkv, D, dtype)
    want = _reference(q, k, v, norms, rope, cos_sin, slots, want_caches)
    got = norm_rope.norm_rope_write(q, k, v, *norms, rope, cos_sin, *got_caches, slots)
    assert got.shape == want.shape and got.is_contiguous()
    _close(got, want, dtype)
    for g, w in zip(got_caches, want_caches):
        _same_pool(g, w, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_context_pass_writes_keys_and_values_only(dtype):
    _, k, v, norms, rope, cos_sin, slots = _case(RMSNorm, 4, 2, 32, 32, 11, dtype, 5, False)
    want_caches, got_caches = _pool(2, 32, dtype), _pool(2, 32, dtype)
    _reference(None, k, v, norms, rope, cos_sin, slots, want_caches)
    assert norm_rope.norm_rope_write(None, k, v, None, norms[1], rope, cos_sin, *got_caches, slots) is None
    for g, w in zip(got_caches, want_caches):
        _same_pool(g, w, dtype)
