"""The gated products (model/fused_gates.py) against the torch ops they replace, on fresh random
inputs: float32 on CUDA or under Triton's interpreter (`TRITON_INTERPRET=1` on a CPU), bf16 on
CUDA only. Inputs are column views as the layers pass them: SwiGLU's gate and up halves of one
product (wider than one program's columns), the attention gate the per-head second half of q_proj's."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")
if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs CUDA or TRITON_INTERPRET=1", allow_module_level=True)

from engine_under_test.model import fused_gates  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32] + ([torch.bfloat16] if torch.cuda.is_available() else [])


@pytest.fixture(autouse=True)
def kernel_on_cpu(monkeypatch):
    if not torch.cuda.is_available():          # the interpreter runs CPU tensors
        monkeypatch.setattr(fused_gates, "_use_kernel", lambda *ts: all(t.stride(-1) == 1 for t in ts))


def _rand(seed, *shape, dtype):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 3).to(DEVICE, dtype)


def _close(got, want, dtype):
    tol = 1e-6 if dtype == torch.float32 else 1e-2
    err = (got.float() - want.float()).norm() / want.float().norm()
    assert torch.isfinite(got.float()).all() and err < tol, f"relative error {err:.2e}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1500, 96])
def test_silu_mul_writes_the_product_into_the_gate_columns(n, dtype):
    product = _rand(n, 7, 2 * n, dtype=dtype)
    gate, up = product.split(n, dim=-1)
    want = F.silu(gate.clone()) * up
    before_up = up.clone()
    out = fused_gates.silu_mul(gate, up)
    assert out.data_ptr() == gate.data_ptr()
    _close(gate, want, dtype)
    assert torch.equal(up, before_up)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("H,D", [(4, 64), (3, 40)])
def test_sigmoid_mul_reads_the_gate_per_head(H, D, dtype):
    T = 9
    o = _rand(1, T, H, D, dtype=dtype)
    gate = _rand(2, T, H, 2 * D, dtype=dtype)[..., D:]          # q_proj's second half of each head
    want = (o.reshape(T, -1) * torch.sigmoid(gate.reshape(T, -1))).view(T, H, D)
    got = fused_gates.sigmoid_mul(o, gate)
    assert got.shape == (T, H, D) and got.is_contiguous()
    _close(got, want, dtype)
