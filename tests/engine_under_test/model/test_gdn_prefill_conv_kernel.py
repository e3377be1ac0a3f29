"""The prompt-pass conv kernels (model/gdn_prefill_conv_kernel.py) against the torch path they
replace (`gated_delta_net.causal_conv1d` + the layer's `_save`), on fresh random inputs.

- q, k, v: the torch path's SiLU(conv) split into heads (float32 within 1e-5, bf16 within 1e-2
  relative norm), contiguous views of one buffer;
- the pool: every saved state written into its block bit for bit (the same copies of inputs and
  initial-state rows), and nothing else (a NaN-poisoned pool, rows 3.. of every block too);
- cases: one sequence and several, L = 1, 2, 3 (the saved state holds initial-state rows), 4,
  and past one block of positions (not a multiple of it); fresh and non-fresh sequences; a ragged
  group (each sequence saving at its own last input); a sequence saving nothing; a destination
  equal to its own source slot and one equal to another sequence's source slot (which that
  sequence's conv and save still read as it was); x a column view of the fused projection
  (rows strided) and a gathered copy;
- a whole Gated-DeltaNet layer: a pass of a ragged group and a short group, then a pass of one
  group (the projection dropped early), through the kernels and through the torch conv: the
  same outputs and the same conv and SSM pools.
float32 on CUDA or under Triton's interpreter (`TRITON_INTERPRET=1` on a CPU); bf16 on CUDA only.
"""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("triton")
if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs CUDA or TRITON_INTERPRET=1", allow_module_level=True)

from conformance.paths import MODELS_DIR  # noqa: E402
from engine_under_test.model.forward_batch import ForwardBatch, LayerCache  # noqa: E402
from engine_under_test.model.gated_delta_net import causal_conv1d  # noqa: E402
from engine_under_test.model.gdn_prefill_conv_kernel import BLOCK_POSITIONS, conv_prefill  # noqa: E402
from engine_under_test.model.linear_attention import GatedDeltaNet, StateSlots, _save  # noqa: E402
from engine_under_test.model.model_config import TargetModelConfig  # noqa: E402

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
DTYPES = [torch.float32] + ([torch.bfloat16] if CUDA else [])
HEADS = (2, 16, 4, 16)                 # Hk, Dk, Hv, Dv: C = 2 * 32 + 64 = 128 (+ 1 channel block when 160)
NUM_BLOCKS = 12


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double().cpu(), want.double().cpu()
    assert not torch.isnan(got).any()
    return float((got - want).norm() / want.norm())


def _close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    else:
        assert _rel(got, want) < 1e-2


class Case:
    """G sequences over a poisoned pool: sequence n reads block src[n] (unless fresh) and saves
    the state after position saves[n] (None: nothing) into block dst[n]."""

    def __init__(self, L: int, fresh: list[bool], saves: list[int | None], src: list[int], dst: list[int],
                 dtype: torch.dtype, heads=HEADS, strided: bool = True, seed: int = 0):
        hk, dk, hv, dv = heads
        G, C = len(fresh), 2 * hk * dk + hv * dv
        gen = torch.Generator().manual_seed(seed)
        wide = torch.randn(G, L, C + 2 * hv + 5, generator=gen).to(DEVICE, dtype)
        self.x = wide[..., 3:3 + C] if strided else wide[..., 3:3 + C].contiguous()   # the fused projection's view
        self.weight = torch.randn(C, 4, generator=gen).to(DEVICE, dtype)
        self.raw = torch.full((NUM_BLOCKS, C, 5), float("nan"), dtype=dtype, device=DEVICE)
        for n, b in enumerate(src):
            self.raw[b, :, :3] = torch.randn(C, 3, generator=gen).to(DEVICE, dtype)
        rows = [(n, p, d) for n, (p, d) in enumerate(zip(saves, dst)) if p is not None]
        idx = torch.tensor([[r[i] for r in rows] for i in range(3)], dtype=torch.long).view(3, len(rows)).to(DEVICE)
        self.slots = StateSlots(src=torch.tensor(src, device=DEVICE), fresh=torch.tensor(fresh, device=DEVICE),
                                any_fresh=any(fresh), all_states=False, save_seq=idx[0], save_pos=idx[1],
                                save_dst=idx[2], dst_grid=None, save_grid=None,
                                ragged=any(p not in (None, L - 1) for p in saves))
        self.heads, self.G, self.L = heads, G, L

    def reference(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(qkv [G, L, C], the pool after the saves) by the layer's torch path."""
        pool = self.raw.clone()
        rows = pool[:, :, :3]
        s = self.slots
        conv0 = torch.where(s.fresh[:, None, None], 0, rows[s.src])
        qkv, states = causal_conv1d(self.x, conv0, self.weight, s.ragged)
        _save(rows, states, s, s.ragged)
        return qkv, pool

    def kernel(self) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        pool = self.raw.clone()
        s = self.slots
        qkv = conv_prefill(self.x, self.weight, pool[:, :, :3], s.src, s.fresh.to(torch.int32), s.save_seq,
                           s.save_pos, s.save_dst, *self.heads)
        return qkv, pool

    def check(self, dtype: torch.dtype) -> None:
        want, want_pool = self.reference()
        (q, k, v), pool = self.kernel()
        hk, dk, hv, dv = self.heads
        assert q.shape == k.shape == (self.G, self.L, hk, dk) and v.shape == (self.G, self.L, hv, dv)
        assert all(t.is_contiguous() for t in (q, k, v))
        assert len({t.untyped_storage().data_ptr() for t in (q, k, v)}) == 1       # one buffer
        for got, cols in ((q, slice(0, hk * dk)), (k, slice(hk * dk, 2 * hk * dk)), (v, slice(2 * hk * dk, None))):
            _close(got.flatten(2), want[..., cols], dtype)
        torch.testing.assert_close(pool, want_pool, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("L", [1, 2, 3, 4, BLOCK_POSITIONS + 5])
@pytest.mark.parametrize("fresh", [False, True])
def test_one_sequence(dtype, L, fresh):
    Case(L, [fresh], [L - 1], src=[4], dst=[7], dtype=dtype, seed=L).check(dtype)
    Case(L, [fresh], [L - 1], src=[4], dst=[4], dtype=dtype, seed=L + 1).check(dtype)      # in place


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("L", [1, 2, 3, 4, 2 * BLOCK_POSITIONS + 3])
@pytest.mark.parametrize("strided", [True, False])
def test_several_sequences_with_aliased_slots(dtype, L, strided):
    """Sequence 0 saves into sequence 1's source block (which sequence 1 reads, for its conv and,
    at L <= 2, for its saved state), sequence 2 into its own, sequence 3 is fresh, sequence 4
    saves nothing; a second channel block, partly filled."""
    Case(L, [False, False, False, True, False], [L - 1, L - 1, L - 1, L - 1, None], src=[1, 2, 3, 5, 6],
         dst=[2, 8, 3, 9, 0], dtype=dtype, heads=(2, 16, 6, 16), strided=strided, seed=10 + L).check(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("L,last", [(BLOCK_POSITIONS + 7, [BLOCK_POSITIONS + 6, BLOCK_POSITIONS + 1, 1, 0]),
                                    (3, [2, 0, 1, 1])])
def test_a_ragged_group_saves_at_each_sequences_last_input(dtype, L, last):
    """Each sequence's state after its own last input (some of them in the initial state's rows),
    one of them into another sequence's source block; the pad rows' outputs are not compared
    (the layer masks them) but computed by the same formula, so they are."""
    Case(L, [False, True, False, False], last, src=[1, 2, 3, 4], dst=[3, 2, 10, 11], dtype=dtype,
         seed=20 + L).check(dtype)


def test_refuses_what_it_cannot_compute():
    case = Case(4, [False], [3], src=[1], dst=[2], dtype=torch.float32)
    s = case.slots
    args = (case.raw[:, :, :3], s.src, s.fresh.to(torch.int32), s.save_seq, s.save_pos, s.save_dst)
    with pytest.raises(ValueError, match="weight"):
        conv_prefill(case.x, case.weight[:, :3], *args, *HEADS)
    with pytest.raises(ValueError, match="C = "):
        conv_prefill(case.x, case.weight, *args, 2, 16, 3, 16)
    with pytest.raises(ValueError, match="contiguous channels"):
        conv_prefill(case.x.transpose(0, 2).contiguous().transpose(0, 2), case.weight, *args, *HEADS)


# ---- a whole layer ----------------------------------------------------------------------------


def _layer() -> GatedDeltaNet:
    cfg = TargetModelConfig.from_dir(MODELS_DIR / "tiny-hybrid")
    with torch.random.fork_rng():
        torch.manual_seed(3)
        layer = GatedDeltaNet(cfg)
        with torch.no_grad():
            layer.A_log.copy_(torch.randn(layer.num_v_heads) * 0.5)
            layer.dt_bias.copy_(torch.randn(layer.num_v_heads))
    return layer.to(DEVICE)


def _pass(layer, lengths, starts, src, dst, saves, pools, seed, num_groups: int) -> torch.Tensor:
    qsl = [0]
    for n in lengths:
        qsl.append(qsl[-1] + n)
    pos = [s + j for n, s in zip(lengths, starts) for j in range(n)]
    batch = ForwardBatch(positions=torch.tensor(pos, device=DEVICE), positions_list=pos, query_start_loc=qsl,
                         seq_lens=[s + n for n, s in zip(lengths, starts)], block_tables={}, block_size_tokens=16,
                         state_in_slots={0: src}, state_fresh=[s == 0 for s in starts],
                         state_save_positions=saves, state_save_slots={0: dst})
    assert len(batch.groups()) == num_groups
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(qsl[-1], layer.in_proj_qkv.in_features, generator=gen).to(DEVICE)
    with torch.inference_mode():
        return layer(x, batch, LayerCache(pools[0][:, :, :3], pools[1], 0), "torch")


def _run(layer, kernel: bool, monkeypatch) -> list[torch.Tensor]:
    """Two passes: sequences of 40 and 36 inputs (a ragged group; the first fresh, saving into the
    second's source block) beside one of 3 (its own group, saving in place) and one of 36 that
    saves nothing; then two of 5 inputs continuing from the saved states (one group, every token)."""
    monkeypatch.setattr(GatedDeltaNet, "_prefill_conv_kernel",
                        lambda self, x, slots, backend: kernel and not slots.all_states and self.kernel == 4)
    gen = torch.Generator().manual_seed(4)
    conv = torch.randn(10, layer.conv_dim, 4, generator=gen).to(DEVICE)
    ssm = torch.randn(10, layer.num_v_heads, layer.head_v_dim, layer.head_k_dim, generator=gen).to(DEVICE)
    pools = (conv, ssm)
    first = _pass(layer, [40, 36, 3, 36], [0, 12, 7, 5], src=[1, 2, 3, 4], dst=[[2], [5], [3], []],
                  saves=[[39], [35], [2], []], pools=pools, seed=5, num_groups=3)
    second = _pass(layer, [5, 5], [40, 48], src=[2, 5], dst=[[6], [5]], saves=[[4], [4]], pools=pools, seed=6,
                   num_groups=1)
    return [first, second, conv, ssm]


def test_a_layer_through_the_kernels_gives_the_torch_paths_outputs_and_pools(monkeypatch):
    layer = _layer()
    calls = []
    kernel_conv = GatedDeltaNet._kernel_conv
    monkeypatch.setattr(GatedDeltaNet, "_kernel_conv", lambda self, *a: calls.append(1) or kernel_conv(self, *a))
    got = _run(layer, True, monkeypatch)
    assert len(calls) == 4                 # 3 groups, then 1
    want = _run(layer, False, monkeypatch)
    assert len(calls) == 4
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert torch.equal(got[2], want[2])    # the conv pool: copies of inputs
