"""The two-stage greedy argmax (model/argmax_kernel.py) against torch.argmax, on CUDA or under
Triton's interpreter (`TRITON_INTERPRET=1` on a CPU): random logits, ties inside one chunk and
across chunks (the first column wins), a row of -inf, rows holding NaN (the first NaN wins),
a row whose maximum sits in the last, partial chunk, -0.0 tied with +0.0, a row of negatives,
and a row-strided view."""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("triton")
if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs CUDA or TRITON_INTERPRET=1", allow_module_level=True)

from engine_under_test.model.argmax_kernel import BLOCK_COLS, argmax_rows  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# (rows, columns, chunk): the 2b vocabulary and the engine's chunk on CUDA; small chunks under the interpreter
SHAPE = (37, 248320, BLOCK_COLS) if DEVICE == "cuda" else (9, 1000, 128)


def _logits(dtype: torch.dtype, seed: int) -> torch.Tensor:
    R, C, block = SHAPE
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(R, C, generator=gen).to(dtype)
    top = x.max() + 1
    x[0, [5, block + 3, 2 * block]] = top              # a tie across chunks: column 5
    x[1, [block + 7, block + 9]] = top                 # a tie inside one chunk
    x[2] = float("-inf")
    x[3, [11, C - 1]] = float("nan")                   # NaN beats everything, the first one
    x[4, C - 1] = top                                  # in the last, partial chunk
    x[5, [3, 2 * block + 1]] = float("inf")
    x[5, 2 * block + 5] = float("nan")
    x[6, 4] = float("inf")
    x[7] = -x[7].abs() - 1                             # all negative; -0.0 and +0.0 tie: the first
    x[7, [block + 2, 9]] = torch.tensor([-0.0, 0.0], dtype=dtype)
    x[8] = -x[8].abs()                                 # all negative: the one nearest zero
    return x.to(DEVICE)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_argmax_rows_is_torch_argmax(dtype):
    R, C, block = SHAPE
    x = _logits(dtype, seed=1)
    out = torch.full((R,), -1, dtype=torch.int64, device=DEVICE)
    argmax_rows(x, out, block_cols=block)
    expected = torch.argmax(x.float().cpu(), dim=-1)
    assert torch.equal(out.cpu(), expected), (out.cpu()[:8].tolist(), expected[:8].tolist())
    assert out.cpu()[:6].tolist() == [5, block + 7, 0, 11, C - 1, 2 * block + 5]
    assert out[7].item() == 9 and x[8, out[8]].item() == x[8].max().item()


def test_argmax_rows_reads_a_row_strided_view_and_writes_only_out():
    R, C, block = SHAPE
    buf = _logits(torch.bfloat16, seed=2)
    rows = buf[: R - 2, : C - 5]                      # the first rows and columns of a larger buffer
    out_buf = torch.full((R,), -7, dtype=torch.int64, device=DEVICE)
    argmax_rows(rows, out_buf[: R - 2], block_cols=block)
    assert torch.equal(out_buf[: R - 2].cpu(), torch.argmax(rows.float().cpu(), dim=-1))
    assert out_buf[R - 2:].tolist() == [-7, -7]


def test_argmax_rows_refuses_what_it_cannot_read():
    x = torch.zeros(4, 64, device=DEVICE)
    with pytest.raises(ValueError, match="argmax_rows"):
        argmax_rows(x.t(), torch.empty(64, dtype=torch.int64, device=DEVICE))
    with pytest.raises(ValueError, match="argmax_rows"):
        argmax_rows(x, torch.empty(4, device=DEVICE))
