"""On CUDA: the engine's device kernels compute the reference's function.

- the snapshot kernel (gdn_snapshots) against the torch recurrent reference in float64: outputs,
  every saved state in its pool slot, nothing written outside the saved slots (NaN-poisoned pool);
- fla-core's chunked (bf16 prefill) and recurrent (float32) kernels through the engine's wrapper;
- the whole target on CUDA against the same checkpoint on the CPU (whose torch kernels match
  transformers, test_hf_parity.py): a batched prefill crossing the 64-token chunk, then a
  4-token snapshot pass, logits and saved states, in float32 and in bf16 (against the CPU's
  own bf16 error); and a ragged group of four prompt lengths, then decode steps;
- the prompt-pass conv kernel (gdn_prefill_conv_kernel) against the layer's torch conv at the 2b
  shapes in bf16: 16 chunks of 512 inputs and a ragged group, saved states bit for bit.
Errors are ||out - ref|| / ||ref||; inputs are drawn fresh from seeded generators.
"""

from __future__ import annotations

import pytest
import torch

from engine_under_test.config import EngineConfig
from engine_under_test.memory.planner import plan_memory
from engine_under_test.model.forward_batch import ForwardBatch
from engine_under_test.model.gated_delta_net import (PLAIN_BATCH, chunk_gated_delta_rule, fla_gated_delta_rule,
                                                     recurrent_gated_delta_rule, varlen_packing)
from engine_under_test.model.weights import load_target
from engine_under_test.pool import UnifiedPool
from engine_under_test.runtime.caches import layer_caches
from engine_under_test.shapes import read_target_shape

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
              pytest.mark.usefixtures("ieee_float32")]



def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double().cpu(), ref.double().cpu()
    assert not torch.isnan(out).any()
    return float((out - ref).norm() / ref.norm())


def _inputs(G, L, hk, hv, dk, dv, seed, dtype):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=gen, device="cuda")  # noqa: E731
    q, k, v = r(G, L, hk, dk).to(dtype), r(G, L, hk, dk).to(dtype), r(G, L, hv, dv).to(dtype)
    g = -torch.rand(G, L, hv, generator=gen, device="cuda")
    beta = torch.rand(G, L, hv, generator=gen, device="cuda").to(dtype)
    return q, k, v, g, beta, r(G, hv, dk, dv)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_snapshot_kernel_writes_every_saved_state(dtype):
    from engine_under_test.model.gdn_snapshots import gdn_snapshots

    G, L, hk, hv, dk, dv = 3, 9, 4, 8, 128, 128
    q, k, v, g, beta, s0 = _inputs(G, L, hk, hv, dk, dv, 1, dtype)
    num_blocks, lead, tail = 40, 96, 32
    raw = torch.full((num_blocks, lead + hv * dv * dk + tail), float("nan"), device="cuda")
    pool = raw[:, lead:lead + hv * dv * dk].unflatten(-1, (hv, dv, dk))       # V-first, strided by page
    src, fresh = torch.tensor([3, 5, 9], device="cuda"), torch.tensor([False, True, False], device="cuda")
    for n in range(G):
        pool[src[n]] = s0[n].transpose(-1, -2)
    saves = {0: [(L - 3, 3), (L - 2, 11), (L - 1, 12)], 1: [(L - 1, 5)], 2: [(t, 13 + t) for t in range(L)]}
    dst = torch.zeros(G, L, dtype=torch.long, device="cuda")
    save = torch.zeros(G, L, dtype=torch.int32, device="cuda")
    for n, rows in saves.items():
        for t, slot in rows:
            dst[n, t], save[n, t] = slot, 1
    start = torch.where(fresh[:, None, None, None], 0, s0)
    ref_o, ref_states = recurrent_gated_delta_rule(q.double(), k.double(), v.double(), g.double(), beta.double(),
                                                   start.double(), save_all_states=True)
    o = gdn_snapshots(q, k, v, g, beta, pool, src, fresh, dst, save)
    torch.cuda.synchronize()
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert _rel(o, ref_o) < tol
    for n, rows in saves.items():
        for t, slot in rows:
            assert _rel(pool[slot].transpose(-1, -2), ref_states[n, t]) < 1e-5, (n, t)
    written = {slot for rows in saves.values() for _, slot in rows} | set(src.tolist())
    assert all(torch.isnan(pool[b]).all() for b in range(num_blocks) if b not in written)
    assert torch.isnan(raw[:, :lead]).all() and torch.isnan(raw[:, lead + hv * dv * dk:]).all()


def test_the_host_built_packing_is_flas_own():
    # what fla derives from a device cu_seqlens (with a sync) equals what the engine builds on the host
    from fla.ops.utils.index import prepare_chunk_indices

    for G, L in ((1, 512), (2, 150), (16, 512), (5, 64), (3, 1)):
        packing = varlen_packing(G, L, torch.device("cuda"))
        assert torch.equal(packing.chunk_indices, prepare_chunk_indices(packing.cu_seqlens, 64)), (G, L)
        assert packing.cu_seqlens.tolist() == [b * L for b in range(G + 1)]


def test_fla_kernels_match_the_reference():
    # bf16 prefill through the chunked kernel (GVA: 4 key heads, 8 value heads), across chunks,
    # G sequences packed into one varlen call (fla_chunk_inputs)
    for G, L in ((2, 150), (5, 64)):
        q, k, v, g, beta, s0 = _inputs(G, L, 4, 8, 128, 128, 2, torch.bfloat16)
        ref_o, ref_s = chunk_gated_delta_rule(q.double(), k.double(), v.double(), g.double(), beta.double(),
                                              s0.double())
        # built by the wrapper, or by the pass, or fla's plain batch of G (a captured pass of several prompts)
        for packing in (None, varlen_packing(G, L, q.device), PLAIN_BATCH):
            o, s = fla_gated_delta_rule(q, k, v, g, beta, s0, save_all_states=False, packing=packing)
            assert _rel(o, ref_o) < 2e-2 and _rel(s, ref_s) < 2e-2, (G, L, _rel(o, ref_o), _rel(s, ref_s))
    # float32 through the recurrent kernel (decode-sized and prefill-sized), and per position
    for L in (1, 70):
        q, k, v, g, beta, s0 = _inputs(3, L, 4, 8, 128, 128, 3 + L, torch.float32)
        o, s = fla_gated_delta_rule(q, k, v, g, beta, s0, save_all_states=False)
        ref_o, ref_s = recurrent_gated_delta_rule(q.double(), k.double(), v.double(), g.double(), beta.double(),
                                                  s0.double(), save_all_states=False)
        assert _rel(o, ref_o) < 1e-5 and _rel(s, ref_s) < 1e-5, L
    o, states = fla_gated_delta_rule(q[:, :5], k[:, :5], v[:, :5], g[:, :5], beta[:, :5], s0, save_all_states=True)
    ref_o, ref_states = recurrent_gated_delta_rule(q[:, :5].double(), k[:, :5].double(), v[:, :5].double(),
                                                   g[:, :5].double(), beta[:, :5].double(), s0.double(), True)
    assert _rel(o, ref_o) < 1e-5 and _rel(states, ref_states) < 1e-5


def _run_target(model_dir, device: str, dtype: torch.dtype):
    """Prefill of two prompts (75 and 13 tokens) in one batch, then one 4-token snapshot pass per
    sequence; returns (prefill logits, snapshot logits, the 4 saved SSM states of sequence 0)."""
    cfg = EngineConfig(model=model_dir, max_num_seqs=2, max_model_len=256, max_num_batched_tokens=256,
                       kv_cache_memory_bytes=16 * 2**20, kv_cache_dtype="float32", mamba_cache_dtype="float32",
                       speculative_config=None)
    pool = UnifiedPool(plan_memory(cfg, read_target_shape(model_dir), None).layout)
    pool.allocate(device)
    model = load_target(model_dir, device, dtype)
    kv, state = layer_caches(pool, model.config.layer_types, 0)
    lay, bs = pool.layout, pool.layout.block_size_tokens
    blocks = iter(range(1, lay.num_blocks))
    tables = {g.group_id: [[next(blocks) for _ in range(-(-256 // bs) if g.is_attention else 5)] for _ in range(2)]
              for g in lay.groups}
    attn = {g: t for g, t in tables.items() if lay.groups[g].is_attention}
    states = {g: t for g, t in tables.items() if lay.groups[g].is_state}
    prompts = [[(7 * i + 3) % 1000 + 2 for i in range(75)], [(11 * i + 5) % 1000 + 2 for i in range(13)]]

    def run(token_lists, starts, fresh, save_positions, save_slots):
        ids = torch.tensor([t for tl in token_lists for t in tl], device=device)
        pos = [s + j for tl, s in zip(token_lists, starts) for j in range(len(tl))]
        qsl = [0, len(token_lists[0]), len(token_lists[0]) + len(token_lists[1])]
        batch = ForwardBatch(positions=torch.tensor(pos, device=device), query_start_loc=qsl,
                             seq_lens=[s + len(tl) for tl, s in zip(token_lists, starts)], block_tables=attn,
                             block_size_tokens=bs, state_in_slots={g: [t[0] for t in ts] for g, ts in states.items()},
                             state_fresh=[fresh] * 2, state_save_positions=save_positions,
                             state_save_slots={g: [[t[i] for i in save_slots] for t in ts] for g, ts in states.items()})
        hidden, _ = model(ids, batch, kv, state)
        return model.compute_logits(hidden)

    prefill = run(prompts, [0, 0], True, [[74], [12]], [0])
    nxt = [[int(t) for t in prefill[[74, 87]].argmax(-1)]]
    block = [[nxt[0][0], 11, 12, 13], [nxt[0][1], 21, 22, 23]]
    snap = run(block, [75, 13], False, [[0, 1, 2, 3]] * 2, [0, 1, 2, 3])
    gid = next(iter(states))
    name = next(n for n, c in state.items() if c.group_id == gid)
    saved = state[name].second[[states[gid][0][i] for i in range(4)]].float().cpu()
    return prefill.cpu(), snap.cpu(), saved


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_target_on_cuda_matches_cpu(tiny_checkpoints, dtype):
    """float32: within 1e-4. bf16: within 1.5x the CPU's own bf16 error (the torch reference
    kernels in bf16 against float32, computed here), which bf16 rounding alone sets."""
    target_dir, _ = tiny_checkpoints
    ref = _run_target(target_dir, "cpu", torch.float32)
    got = _run_target(target_dir, "cuda", dtype)
    errs = [_rel(a, b) for a, b in zip(got, ref)]
    if dtype == torch.float32:
        bars = [1e-4] * 3
    else:
        bars = [1.5 * _rel(a, b) + 1e-3 for a, b in zip(_run_target(target_dir, "cpu", dtype), ref)]
    print(f"{dtype}: rel err prefill {errs[0]:.2e} snapshot pass {errs[1]:.2e} saved states {errs[2]:.2e} "
          f"(bars {', '.join(f'{b:.2e}' for b in bars)})")
    assert all(e < b for e, b in zip(errs, bars)), (errs, bars)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_ragged_group_on_cuda_matches_cpu(tiny_checkpoints, dtype):
    """Four prompts of 75 .. 66 tokens as one ragged group padded to 75 (in bf16 fla's chunked call
    over the pad rows, whose gate and step are 0), then decode steps that read the states saved
    at each prompt's own last input: logits against the CPU's float32 run, bars as above."""
    from tests.engine_under_test.model.test_ragged_groups import ragged_pass_logits

    target_dir, _ = tiny_checkpoints
    ref = ragged_pass_logits(target_dir, "cpu", torch.float32)
    err = _rel(ragged_pass_logits(target_dir, "cuda", dtype), ref)
    bar = 1e-4 if dtype == torch.float32 else 1.5 * _rel(ragged_pass_logits(target_dir, "cpu", dtype), ref) + 1e-3
    print(f"{dtype}: ragged group rel err {err:.2e} (bar {bar:.2e})")
    assert err < bar, (err, bar)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_conv_kernel_matches_the_torch_conv_and_writes_the_saved_windows(dtype):
    """conv_snapshots == causal_conv1d (SiLU output and every position's window) on random data,
    one fresh sequence, a destination equal to its source slot, a strided conv pool, inputs as
    a column view of a wider projection; blocks nothing saves keep their poison."""
    from engine_under_test.model.gated_delta_net import causal_conv1d
    from engine_under_test.model.gdn_conv_kernel import conv_snapshots

    G, L, C, K, wide = 3, 9, 300, 4, 340
    gen = torch.Generator(device="cuda").manual_seed(7)
    proj = torch.randn(G, L, wide, generator=gen, device="cuda").to(dtype)
    x = proj[..., 17:17 + C]                                   # channels contiguous, rows strided
    weight = torch.randn(C, K, generator=gen, device="cuda").to(dtype)
    num_blocks = 24
    pool_full = torch.full((num_blocks, C, K + 1), float("nan"), device="cuda", dtype=dtype)
    conv_pool = pool_full[:, :, :K - 1]
    src, fresh = torch.tensor([2, 6, 9], device="cuda"), torch.tensor([False, True, False], device="cuda")
    start = torch.randn(G, C, K - 1, generator=gen, device="cuda").to(dtype)
    for n in range(G):
        conv_pool[src[n]] = start[n]
    saves = {0: [(0, 2), (4, 12), (L - 1, 13)], 1: [(L - 1, 6)], 2: [(t, 14 + t) for t in range(L)]}
    dst = torch.zeros(G, L, dtype=torch.long, device="cuda")
    save = torch.zeros(G, L, dtype=torch.int32, device="cuda")
    for n, rows in saves.items():
        for t, slot in rows:
            dst[n, t], save[n, t] = slot, 1
    ref_start = torch.where(fresh[:, None, None], 0, start)
    ref_out, ref_states = causal_conv1d(x.double(), ref_start.double(), weight.double(), save_all_states=True)
    out = conv_snapshots(x, weight, conv_pool, src, fresh, dst, save)
    torch.cuda.synchronize()
    assert out.shape == (G, L, C) and out.is_contiguous()
    assert _rel(out, ref_out) < (1e-6 if dtype == torch.float32 else 1e-2)
    for n, rows in saves.items():
        for t, slot in rows:
            assert torch.equal(conv_pool[slot].double().cpu(), ref_states[n, t].cpu()), (n, t)
    written = {slot for rows in saves.values() for _, slot in rows} | set(src.tolist())
    assert all(torch.isnan(conv_pool[b]).all() for b in range(num_blocks) if b not in written)
    assert torch.isnan(pool_full[:, :, K - 1:]).all()


def test_snapshot_kernel_reads_column_views_and_writes_into_out():
    """q, k, v as column views of one [G, L, C] tensor and a preallocated `out` give the same
    outputs and states as contiguous inputs."""
    from engine_under_test.model.gdn_snapshots import gdn_snapshots

    G, L, hk, hv, dk, dv = 2, 9, 4, 8, 128, 128
    q, k, v, g, beta, s0 = _inputs(G, L, hk, hv, dk, dv, 3, torch.float32)
    packed = torch.cat([q.flatten(2), k.flatten(2), v.flatten(2)], dim=-1)
    qv = packed[..., :hk * dk].unflatten(-1, (hk, dk))
    kv = packed[..., hk * dk:2 * hk * dk].unflatten(-1, (hk, dk))
    vv = packed[..., 2 * hk * dk:].unflatten(-1, (hv, dv))
    assert not qv.is_contiguous()
    pools = [torch.zeros(8, hv, dv, dk, device="cuda") for _ in range(2)]
    for pool in pools:
        pool[1], pool[2] = s0[0].transpose(-1, -2), s0[1].transpose(-1, -2)
    src, fresh = torch.tensor([1, 2], device="cuda"), torch.tensor([False, False], device="cuda")
    dst = torch.tensor([[1] + [3] * (L - 1), [2] + [4] * (L - 1)], device="cuda")
    save = torch.zeros(G, L, dtype=torch.int32, device="cuda")
    save[:, 0] = save[:, L - 1] = 1
    ref = gdn_snapshots(q, k, v, g, beta, pools[0], src, fresh, dst, save)
    out = torch.full_like(ref, float("nan"))
    got = gdn_snapshots(qv, kv, vv, g, beta, pools[1], src, fresh, dst, save, out=out)
    torch.cuda.synchronize()
    assert got.data_ptr() == out.data_ptr()
    assert torch.equal(got, ref) and torch.equal(pools[0], pools[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_snapshot_kernel_computes_the_layers_gates_from_raw_projections(dtype):
    """gates=(A_log, dt_bias) with the raw a / b projections == the layer's torch gates
    (g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b) in the model dtype), a values past
    softplus's threshold of 20 included."""
    import torch.nn.functional as F

    from engine_under_test.model.gdn_snapshots import gdn_snapshots

    G, L, hk, hv, dk, dv = 2, 9, 4, 8, 128, 128
    q, k, v, _, _, s0 = _inputs(G, L, hk, hv, dk, dv, 5, dtype)
    gen = torch.Generator(device="cuda").manual_seed(11)
    a_raw = (4 * torch.randn(G, L, hv, generator=gen, device="cuda")).to(dtype)
    a_raw[0, 0, 0] = 25.0
    b_raw = torch.randn(G, L, hv, generator=gen, device="cuda").to(dtype)
    A_log = torch.randn(hv, generator=gen, device="cuda").to(dtype)
    dt_bias = torch.randn(hv, generator=gen, device="cuda").to(dtype)
    g = -A_log.float().exp() * F.softplus(a_raw.float() + dt_bias)
    beta = b_raw.sigmoid()
    pools = [torch.zeros(6, hv, dv, dk, device="cuda") for _ in range(2)]
    for pool in pools:
        pool[1], pool[2] = s0[0].transpose(-1, -2), s0[1].transpose(-1, -2)
    src, fresh = torch.tensor([1, 2], device="cuda"), torch.tensor([False, False], device="cuda")
    dst = torch.tensor([[1] * L, [2] * L], device="cuda")
    save = torch.zeros(G, L, dtype=torch.int32, device="cuda")
    save[:, L - 1] = 1
    ref = gdn_snapshots(q, k, v, g, beta, pools[0], src, fresh, dst, save)
    got = gdn_snapshots(q, k, v, a_raw, b_raw, pools[1], src, fresh, dst, save, gates=(A_log, dt_bias))
    torch.cuda.synchronize()
    assert _rel(got, ref) < 1e-5 and _rel(pools[1], pools[0]) < 1e-5


@pytest.mark.parametrize("lengths", [[512] * 16, [512] * 15 + [457]])
def test_prefill_conv_kernel_matches_the_torch_conv_at_the_2b_shapes(lengths):
    """conv_prefill (gdn_prefill_conv_kernel.py) == the layer's torch conv (causal_conv1d, SiLU, q / k / v
    split, `_save`) in bf16 at Qwen3.5-2b's shapes (Hk = Hv = 16, Dk = Dv = 128: C = 6144): 16 prompt
    chunks of 512 inputs read as a column view of the projection (row stride C + 2 Hv), and a ragged
    group (one chunk of 457, padded, saving at its own last input; a gathered copy); some
    sequences fresh, one saving into another's source block. Outputs within bf16 rounding, the
    saved states bit for bit, no other block written (NaN-poisoned pool)."""
    from engine_under_test.model.gated_delta_net import causal_conv1d
    from engine_under_test.model.gdn_prefill_conv_kernel import conv_prefill
    from engine_under_test.model.linear_attention import StateSlots, _save

    hk, dk, hv, dv = 16, 128, 16, 128
    G, L, C = len(lengths), max(lengths), 2 * hk * dk + hv * dv
    ragged = min(lengths) < L
    gen = torch.Generator(device="cuda").manual_seed(13)
    proj = torch.randn(G * L, C + 2 * hv, generator=gen, device="cuda").to(torch.bfloat16)
    x = proj[:, :C].unflatten(0, (G, L))
    if ragged:                                      # batch.gather's copy: a pad row repeats the last input
        rows = torch.tensor([g * L + min(j, n - 1) for g, n in enumerate(lengths) for j in range(L)], device="cuda")
        x = proj[rows, :C].view(G, L, C)
    weight = torch.randn(C, 4, generator=gen, device="cuda").to(torch.bfloat16)
    num_blocks = 2 * G + 2
    pool = torch.full((num_blocks, C, 4), float("nan"), device="cuda", dtype=torch.bfloat16)
    src = torch.arange(1, G + 1, device="cuda")
    pool[1:G + 1, :, :3] = torch.randn(G, C, 3, generator=gen, device="cuda").to(torch.bfloat16)
    fresh = torch.arange(G, device="cuda") % 5 == 0
    dst = torch.arange(G + 1, 2 * G + 1, device="cuda")
    dst[3] = 5                                      # sequence 4's source block
    slots = StateSlots(src=src, fresh=fresh, any_fresh=True, all_states=False,
                       save_seq=torch.arange(G, device="cuda"), save_pos=torch.tensor(lengths, device="cuda") - 1,
                       save_dst=dst, dst_grid=None, save_grid=None, ragged=ragged)
    want_pool = pool.clone()
    conv0 = torch.where(fresh[:, None, None], 0, pool[:, :, :3][src])
    qkv, states = causal_conv1d(x, conv0, weight, ragged)
    _save(want_pool[:, :, :3], states, slots, ragged)
    q, k, v = conv_prefill(x, weight, pool[:, :, :3], src, fresh.to(torch.int32), slots.save_seq, slots.save_pos,
                           dst, hk, dk, hv, dv)
    torch.cuda.synchronize()
    for got, cols in ((q, slice(0, hk * dk)), (k, slice(hk * dk, 2 * hk * dk)), (v, slice(2 * hk * dk, None))):
        assert got.is_contiguous() and _rel(got.flatten(2), qkv[..., cols]) < 1e-2
    torch.testing.assert_close(pool, want_pool, rtol=0, atol=0, equal_nan=True)
