"""fla's chunked gated delta rule is called with shapes that do not depend on the prefill step.

fla's cumsum kernel takes the batch size as a compile-time constant (and autotunes per batch
size), and its in-kernel l2norm autotunes per 2048 rows of q / k: a prefill step that brought a
new number of prompts or a new token count compiled and benchmarked kernels on the serving path.
`fla_chunk_inputs` packs every prefill group into batch 1 with `cu_seqlens` and normalises q and
k itself; the packing (`cu_seqlens`, `chunk_indices`) is built on the host once per pass, as fla
would derive it with a stream sync in every layer. Checked on the CPU: the arguments, and
`fla_gated_delta_rule`'s chunk path through a stand-in of fla's entry point that computes the chunked rule with the engine's torch reference
per packed sequence, honouring `use_qk_l2norm_in_kernel` (it refuses q / k that are not unit
rows when the kernel is told not to normalise them).
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

from engine_under_test.model.gated_delta_net import (CHUNK_MIN_TOKENS, FLA_CHUNK_TOKENS, PLAIN_BATCH,
                                                     chunk_gated_delta_rule, fla_chunk_inputs, fla_gated_delta_rule,
                                                     l2norm_float32, varlen_packing)
from engine_under_test.model.static_batch import StaticBatch


def _inputs(G, L, hk=2, hv=4, dk=16, dv=8, seed=0, dtype=torch.bfloat16):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=gen)  # noqa: E731
    q, k, v = r(G, L, hk, dk).to(dtype), r(G, L, hk, dk).to(dtype), r(G, L, hv, dv).to(dtype)
    g = -torch.rand(G, L, hv, generator=gen)
    beta = torch.rand(G, L, hv, generator=gen).to(dtype)
    return q, k, v, g, beta, r(G, hv, dk, dv)


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize("G", [1, 3, 7])
def test_chunk_inputs_are_one_packed_batch_of_unit_rows(G):
    L = 70
    q, k, v, g, beta, s0 = _inputs(G, L)
    args = fla_chunk_inputs(q, k, v, g, beta, s0)
    assert args["use_qk_l2norm_in_kernel"] is False
    if G == 1:      # one sequence: batch 1 of L tokens, nothing for fla to derive (and cache) from cu_seqlens
        assert "cu_seqlens" not in args and "chunk_indices" not in args
        assert "cu_seqlens" not in fla_chunk_inputs(q, k, v, g, beta, s0, varlen_packing(1, L, q.device))
    else:
        assert args["cu_seqlens"].tolist() == [i * L for i in range(G + 1)]
        assert args["cu_seqlens"].dtype == torch.long
        assert args["chunk_indices"].tolist() == [[i, c] for i in range(G) for c in range(2)]   # 70 tokens: 2 chunks
    for name in ("q", "k", "v", "g", "beta"):
        assert args[name].shape[:2] == (1, G * L), name
    assert args["initial_state"] is s0
    for name, x in (("q", q), ("k", k)):
        norms = args[name].float().norm(dim=-1)
        assert torch.allclose(norms, torch.ones_like(norms), atol=1e-2), name
        assert args[name].dtype == x.dtype
        # sequence i's tokens are rows i * L .. (i + 1) * L - 1 of the packed batch
        assert torch.equal(args[name][0].view(G, L, *x.shape[2:]), l2norm_float32(x))
    assert torch.equal(args["v"][0].view(G, L, *v.shape[2:]), v)


def test_the_varlen_packing_lists_every_chunk_of_every_sequence_in_order():
    # fla's layout: one row (sequence, chunk within it) per 64-token chunk, a partial last chunk included
    for G, L in ((1, 512), (3, 130), (2, 64), (4, 1)):
        packing = varlen_packing(G, L, torch.device("cpu"))
        chunks = -(-L // FLA_CHUNK_TOKENS)
        assert packing.cu_seqlens.tolist() == list(range(0, (G + 1) * L, L))
        rows = packing.chunk_indices.tolist()
        assert len(rows) == G * chunks
        assert rows == sorted(rows) and {tuple(r) for r in rows} == {(s, c) for s in range(G) for c in range(chunks)}
        # every chunk starts inside its sequence
        assert all(packing.cu_seqlens[s] + c * FLA_CHUNK_TOKENS < packing.cu_seqlens[s + 1] for s, c in rows)


def test_a_given_packing_is_passed_as_it_is():
    # the pass builds one packing and every layer hands fla the same tensors (fla caches by identity)
    q, k, v, g, beta, s0 = _inputs(2, 70)
    packing = varlen_packing(2, 70, torch.device("cpu"))
    args = fla_chunk_inputs(q, k, v, g, beta, s0, packing)
    assert args["cu_seqlens"] is packing.cu_seqlens and args["chunk_indices"] is packing.chunk_indices


def test_a_captured_pass_hands_fla_its_plain_batch():
    # a static batch (a CUDA graph's pass) answers the layer's packing with PLAIN_BATCH: no host-built
    # tensor inside a capture, and fla sees G sequences of L tokens with no cu_seqlens to cache from
    G, L = 3, 70
    batch = StaticBatch(G, L, 16, True, torch.zeros(G * L, dtype=torch.long), torch.ones(G, dtype=torch.long), {}, {})
    assert batch.memo(("fla_varlen", G, L), lambda: pytest.fail("a packing built for a static batch")) is PLAIN_BATCH
    q, k, v, g, beta, s0 = _inputs(G, L)
    args = fla_chunk_inputs(q, k, v, g, beta, s0, PLAIN_BATCH)
    assert "cu_seqlens" not in args and "chunk_indices" not in args and args["use_qk_l2norm_in_kernel"] is False
    assert torch.equal(args["q"], l2norm_float32(q)) and torch.equal(args["k"], l2norm_float32(k))
    assert args["v"] is v and args["g"] is g and args["beta"] is beta and args["initial_state"] is s0


def test_l2norm_float32_matches_the_torch_reference():
    x = torch.randn(5, 3, 64, dtype=torch.bfloat16)
    ref = x.double() / (x.double().square().sum(-1, keepdim=True) + 1e-6).sqrt()
    assert _rel(l2norm_float32(x), ref) < 1e-2
    assert l2norm_float32(x).dtype == torch.bfloat16


@pytest.fixture
def fla_stand_in(monkeypatch):
    """fla.ops.gated_delta_rule with a chunked entry point computed by the torch reference per
    packed sequence; records the batch size of every call."""
    calls = []

    def chunk(q, k, v, g, beta, initial_state, output_final_state, use_qk_l2norm_in_kernel, cu_seqlens=None,
              chunk_indices=None):
        assert output_final_state
        if cu_seqlens is None:        # one sequence, fla's plain batch of one
            assert chunk_indices is None and initial_state.shape[0] == 1
            cu_seqlens = torch.tensor([0, q.shape[1]])
        bounds = cu_seqlens.tolist()
        assert chunk_indices is None or chunk_indices.tolist() == [
            [i, c] for i, (a, b) in enumerate(zip(bounds, bounds[1:])) for c in range(-(-(b - a) // FLA_CHUNK_TOKENS))]
        calls.append(q.shape[0])
        if q.shape[0] != 1:
            raise AssertionError(f"varlen call with batch {q.shape[0]}")
        if not use_qk_l2norm_in_kernel:
            for x in (q, k):
                norms = x.float().norm(dim=-1)
                if not torch.allclose(norms, torch.ones_like(norms), atol=1e-2):
                    raise AssertionError("q / k are not unit rows and the kernel is told not to normalise them")
        outs, states = [], []
        for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
            o, s = chunk_gated_delta_rule(q[:, a:b].double(), k[:, a:b].double(), v[:, a:b].double(),
                                          g[:, a:b].double(), beta[:, a:b].double(), initial_state[i:i + 1].double())
            outs.append(o.to(v.dtype))
            states.append(s.float())
        return torch.cat(outs, dim=1), torch.cat(states, dim=0)

    def recurrent(*args, **kwargs):
        raise AssertionError("the recurrent kernel was called for a half-precision prefill")

    ops = types.ModuleType("fla.ops.gated_delta_rule")
    ops.chunk_gated_delta_rule, ops.fused_recurrent_gated_delta_rule = chunk, recurrent
    monkeypatch.setitem(sys.modules, "fla", types.ModuleType("fla"))
    monkeypatch.setitem(sys.modules, "fla.ops", types.ModuleType("fla.ops"))
    monkeypatch.setitem(sys.modules, "fla.ops.gated_delta_rule", ops)
    return calls


@pytest.mark.parametrize("G", [1, 4])
def test_prefill_through_the_packed_call_matches_the_batched_reference(fla_stand_in, G):
    L = CHUNK_MIN_TOKENS + 6
    q, k, v, g, beta, s0 = _inputs(G, L, seed=G)
    o, s = fla_gated_delta_rule(q, k, v, g, beta, s0, save_all_states=False)
    ref_o, ref_s = chunk_gated_delta_rule(q.double(), k.double(), v.double(), g.double(), beta.double(), s0.double())
    assert fla_stand_in == [1]
    assert o.shape == v.shape and s.shape == s0.shape
    assert _rel(o, ref_o) < 2e-2 and _rel(s, ref_s) < 2e-2, (_rel(o, ref_o), _rel(s, ref_s))
