"""The fused norm kernels against the norm modules' torch code, on fresh random inputs: float32
on CUDA or under Triton's interpreter (`TRITON_INTERPRET=1` on a CPU), bf16 on CUDA only."""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("triton")
if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs CUDA or TRITON_INTERPRET=1", allow_module_level=True)

from engine_under_test.model import fused_norms  # noqa: E402
from engine_under_test.model.norm import GatedRMSNorm, RMSNorm, ZeroCenteredRMSNorm  # noqa: E402

DTYPES = [torch.float32] + ([torch.bfloat16] if torch.cuda.is_available() else [])


@pytest.fixture(autouse=True)
def kernel_on_cpu(monkeypatch):
    if not torch.cuda.is_available():          # the interpreter runs CPU tensors
        monkeypatch.setattr(fused_norms, "_use_kernel", lambda x: x.stride(-1) == 1)


def _norm(cls, dim, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    norm = cls(dim, 1e-6).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(dim, generator=g) * 0.5 + (0 if cls is ZeroCenteredRMSNorm else 1))
    return norm.to("cuda" if torch.cuda.is_available() else "cpu"), g


def _rand(g, *shape, dtype):
    return torch.randn(*shape, generator=g).to(dtype).to("cuda" if torch.cuda.is_available() else "cpu")


def _close(got, want, dtype):
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    err = (got.float() - want.float()).norm() / want.float().norm()
    assert torch.isfinite(got.float()).all() and err < tol, f"relative error {err:.2e}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cls,dim", [(ZeroCenteredRMSNorm, 96), (RMSNorm, 64), (ZeroCenteredRMSNorm, 300)])
def test_add_and_norm_match_the_modules(cls, dim, dtype):
    norm, g = _norm(cls, dim, dtype, dim)
    h, x = _rand(g, 7, dim, dtype=dtype), _rand(g, 7, dim, dtype=dtype)
    got_h, got_y = fused_norms.add_rms_norm(h, x, norm)
    want_h = h + x
    _close(got_h, want_h, dtype)
    _close(got_y, norm.torch_forward(want_h), dtype)
    _close(fused_norms.rms_norm(x, norm), norm.torch_forward(x), dtype)
    heads = _rand(g, 5, 3, dim, dtype=dtype)[..., : dim // 2]          # a strided view, as q_norm sees
    _close(fused_norms.rms_norm(heads, norm_half := _norm(cls, dim // 2, dtype, 3)[0]), norm_half.torch_forward(heads), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cls", [ZeroCenteredRMSNorm, RMSNorm])
def test_norm_reads_heads_of_a_fused_projection_in_place(cls, dtype):
    """[T, heads, dim] columns of a wider projection (token and head strides that do not merge,
    as q_norm / k_norm see the fused q, k, v product): the kernel reads them at those strides."""
    norm, g = _norm(cls, 32, dtype, 9)
    wide = _rand(g, 5, 3 * 32 + 40, dtype=dtype)
    heads = wide[:, 8:8 + 3 * 32].view(5, 3, 32)
    assert heads.stride() == (3 * 32 + 40, 32, 1)
    with pytest.raises(RuntimeError):
        heads.view(-1, 32)                                                 # the rows do not merge
    _close(fused_norms.rms_norm(heads, norm), norm.torch_forward(heads), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gated_norm_matches_the_module(dtype):
    norm, g = _norm(GatedRMSNorm, 32, dtype, 5)
    x, gate = _rand(g, 6, 4, 32, dtype=dtype), _rand(g, 6, 4, 32, dtype=dtype)
    want = (norm.weight * norm.normalize(x).to(dtype) * torch.nn.functional.silu(gate.float())).to(dtype)
    _close(fused_norms.gated_rms_norm(x, gate, norm), want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gated_norm_reads_a_gate_of_a_fused_projection_in_place(dtype):
    """The gate as Gated-DeltaNet passes z: [T, heads, dim] columns of the fused input projection
    (rows that do not merge with the heads), read at those strides, no copy."""
    norm, g = _norm(GatedRMSNorm, 32, dtype, 6)
    x = _rand(g, 6, 4, 32, dtype=dtype)
    wide = _rand(g, 6, 40 + 4 * 32, dtype=dtype)
    gate = wide[:, 40:].view(6, 4, 32)
    with pytest.raises(RuntimeError):
        gate.view(-1, 32)                                                  # the rows do not merge
    want = (norm.weight * norm.normalize(x).to(dtype) * torch.nn.functional.silu(gate.float())).to(dtype)
    _close(fused_norms.gated_rms_norm(x, gate, norm), want, dtype)


def _torch_l2(x, eps):
    """gated_delta_net.l2norm_float32's torch ops, written out: the reference of the kernel."""
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True, dtype=torch.float32)
    return torch.mul(x, torch.rsqrt(norm.square_() + eps)).to(x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 37, 4, 128), (2, 5, 64), (3, 48)])
def test_l2_norm_matches_the_torch_ops(shape, dtype):
    """Rows of 128 (q and k at the 2b shapes, a row count not a multiple of the program's rows), 64 and
    48 (not a power of two); a zero row gives zeros; a non-contiguous x takes the torch ops."""
    g = torch.Generator().manual_seed(sum(shape))
    x = _rand(g, *shape, dtype=dtype) * 3
    x.view(-1, shape[-1])[1].zero_()
    got = fused_norms.l2_norm(x, 1e-6)
    assert got.shape == x.shape and got.dtype == dtype and got.is_contiguous()
    _close(got, _torch_l2(x, 1e-6), dtype)
    assert got.view(-1, shape[-1])[1].abs().max() == 0
    rows = got.float().view(-1, shape[-1]).norm(dim=-1)
    assert torch.allclose(rows[2:], torch.ones_like(rows[2:]), atol=1e-2)          # unit rows
    strided = x.transpose(0, -2) if x.dim() > 2 else x[:, ::2]
    _close(fused_norms.l2_norm(strided, 1e-6), _torch_l2(strided, 1e-6), dtype)
