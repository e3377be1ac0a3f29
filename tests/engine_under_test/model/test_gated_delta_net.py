"""The Gated-DeltaNet reference kernels agree with each other: chunked == recurrent, snapshots
== the final states of every prefix, conv continuation == conv over the whole sequence."""

from __future__ import annotations

import torch

from engine_under_test.model.gated_delta_net import causal_conv1d, chunk_gated_delta_rule, recurrent_gated_delta_rule


def _inputs(L, G=2, hk=2, hv=4, dk=8, dv=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(G, L, hk, dk, generator=g), torch.randn(G, L, hk, dk, generator=g)
    v = torch.randn(G, L, hv, dv, generator=g)
    decay = -torch.rand(G, L, hv, generator=g)
    beta = torch.rand(G, L, hv, generator=g)
    state = torch.randn(G, hv, dk, dv, generator=g)
    return q, k, v, decay, beta, state


def test_chunked_equals_recurrent_across_chunks():
    q, k, v, g, beta, s0 = _inputs(L=70)
    o_c, s_c = chunk_gated_delta_rule(q, k, v, g, beta, s0, chunk_size=16)
    o_r, s_r = recurrent_gated_delta_rule(q, k, v, g, beta, s0, save_all_states=False)
    assert torch.allclose(o_c, o_r, atol=1e-4) and torch.allclose(s_c, s_r, atol=1e-4)


def test_snapshots_are_prefix_states():
    q, k, v, g, beta, s0 = _inputs(L=5)
    _, states = recurrent_gated_delta_rule(q, k, v, g, beta, s0, save_all_states=True)
    for t in range(5):
        _, s_t = chunk_gated_delta_rule(q[:, :t + 1], k[:, :t + 1], v[:, :t + 1], g[:, :t + 1], beta[:, :t + 1], s0)
        assert torch.allclose(states[:, t], s_t, atol=1e-4)


def test_conv_continuation_and_snapshots():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 12, 6, generator=gen)
    w = torch.randn(6, 4, generator=gen)
    zeros = torch.zeros(2, 6, 3)
    full, _ = causal_conv1d(x, zeros, w, save_all_states=False)
    head, state = causal_conv1d(x[:, :7], zeros, w, save_all_states=False)
    tail, snaps = causal_conv1d(x[:, 7:], state, w, save_all_states=True)
    assert torch.allclose(torch.cat([head, tail], 1), full, atol=1e-5)
    _, state_9 = causal_conv1d(x[:, :9], zeros, w, save_all_states=False)
    assert torch.allclose(snaps[:, 1], state_9)
