"""The chain kernel (runtime/chain_kernel.py) against `chained_inputs.chain_inputs` + the torch
chain body's masked copies: on a meta buffer of random fields (two attention groups, two state
groups, padding rows with prev_row < 0, rows drafting and not, every accepted length 0..k, a
previous row other than the sequence's own), the kernel leaves the whole buffer exactly as the
torch path does. On CUDA or under Triton's interpreter (`TRITON_INTERPRET=1` on a CPU)."""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("triton")
if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs CUDA or TRITON_INTERPRET=1", allow_module_level=True)

from engine_under_test.runtime.chain_kernel import ChainFields, chain_in_place  # noqa: E402
from engine_under_test.runtime.chained_inputs import chain_inputs  # noqa: E402
from engine_under_test.runtime.decode_buffers import MetaBuffers  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _torch_chain(meta: MetaBuffers, tokens, B: int, k: int, bs: int, attn, state) -> None:
    """What StepBodies.chain does off CUDA."""
    argmax, accepted, drafting, drafts = tokens
    valid, vals = chain_inputs(argmax, accepted, drafting, drafts, meta.view("prev_row")[:B], meta.view("nc_opt")[:B],
                               {g: meta.view(f"table{g}")[:B] for g in attn},
                               {s: meta.view(f"dst{s}")[:B] for s in state}, k, bs)
    for name, value in vals.items():
        flat = meta.view(name).reshape(-1)[:value.numel()]
        keep = valid.view(B, *[1] * (value.dim() - 1)).expand_as(value).reshape(-1)
        flat.copy_(torch.where(keep, value.reshape(-1), flat))


@pytest.mark.parametrize("k", [1, 4, 8])
def test_chain_kernel_writes_what_the_torch_chain_writes(k):
    Bm, B, L, bs, W = 12, 10, k + 1, 16, 40
    attn, state = [0, 2], [1, 3]
    gen = torch.Generator().manual_seed(k)
    fields = {"ids": (Bm * L,), "pos": (Bm * L,), "seq_lens": (Bm,), "prev_row": (Bm,), "nc_opt": (Bm,),
              "drafts": (Bm, k), "capacity_tokens": (Bm,)}
    for g in attn:
        fields |= {f"table{g}": (Bm, W), f"blk{g}": (Bm * L,), f"row{g}": (Bm * L,)}
    for s in state:
        fields |= {f"src{s}": (Bm,), f"fresh{s}": (Bm,), f"dst{s}": (Bm, L), f"save{s}": (Bm, L)}
    meta = MetaBuffers(fields, {}, DEVICE)
    meta.device_buffer.copy_(torch.randint(0, 1000, (meta.num_elements,), generator=gen))
    prev = torch.tensor([3, -1, 0, 7, 1, -1, 2, 9, 4, 5, 6, 8][:Bm])         # padding rows, reordered rows
    meta.view("prev_row").copy_(prev)
    meta.view("nc_opt").copy_(torch.randint(L + k, 500, (Bm,), generator=gen))
    for g in attn:
        meta.view(f"table{g}").copy_(torch.randint(1, 5000, (Bm, W), generator=gen))
    argmax = torch.randint(0, 50000, (Bm * L,), generator=gen).to(DEVICE)
    accepted = (torch.arange(Bm) % (k + 1)).to(DEVICE)                        # every length 0 .. k
    accepted[3] = k + 3                                                       # out of range: clamped to k
    drafting = (torch.arange(Bm) % 3 != 0).long().to(DEVICE)
    drafts = torch.randint(0, 50000, (Bm * k,), generator=gen).to(DEVICE)
    tokens = (argmax, accepted, drafting, drafts)

    expected = MetaBuffers(fields, {}, DEVICE)
    expected.device_buffer.copy_(meta.device_buffer)
    before = meta.device_buffer.clone()
    _torch_chain(expected, tokens, B, k, bs, attn, state)
    chain_in_place(meta.device_buffer, ChainFields(meta.offsets, attn, state, W, DEVICE), *tokens, B, k, bs)
    for name in fields:
        assert torch.equal(meta.view(name), expected.view(name)), name
    # a padding row (prev_row -1) and the rows past B keep the host's values; row 0 reads step
    # n's row 3, whose accepted length is clamped to k (nothing rolled back)
    changed = meta.device_buffer != before
    for name in ("ids", "pos", "blk0", "row2"):
        start, rows = meta.offsets[name], meta.view(name).reshape(Bm, -1).shape[1]
        assert not changed[start + rows:start + 2 * rows].any() and not changed[start + B * rows:start + Bm * rows].any()
    assert meta.view("seq_lens")[0].item() == before[meta.offsets["nc_opt"]].item() + L
    assert meta.view("ids")[0].item() == argmax[3 * L + k].item()
