"""Tile sweep of the deferred Gated-DeltaNet verify kernel and its commit on a GPU (not a test;
prints a table).

    python benchmarks/gpu_gdn_sweep.py

One layer of a verify step on the 2b shapes (16 key and 16 value heads of 128, L = 1 + k = 9,
bf16 inputs as column views of one projection with the raw gates, a float32 state pool with the
sequences' slots scattered) at B = 1, 8 and 32 sequences: for every (value rows per program,
warps) below, the median time of one call of the deferred pass (`gdn_snapshots(keep=...)`) and of
the commit (`gdn_commit`, accepted lengths spread over 0 .. k), each replayed as a CUDA graph of 18
calls (a step's Gated-DeltaNet layers; triton.testing.do_bench_cudagraph, so no launch cost is
counted), and the largest relative difference of the outputs and committed states against the
engine's defaults (BLOCK_V, COMMIT_BLOCK_V, NUM_WARPS) on the same inputs. The fastest setting of
each kernel per B is printed last (the two are chosen separately).
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine_under_test.model import gdn_snapshots as gs  # noqa: E402
from engine_under_test.model.kept_inputs import KeptInputs  # noqa: E402

HK, HV, DK, DV, K_SPEC = 16, 16, 128, 128, 8
BLOCK_VS = (8, 16, 32)
LAYERS = 18            # Gated-DeltaNet layers of the 2b target: a graph replays this many calls
WARPS = (1, 2, 4)


def _inputs(B: int, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    L = 1 + K_SPEC
    width = 2 * HK * DK + HV * DV
    qkv = torch.randn(B, L, width, generator=gen, device="cuda").to(torch.bfloat16)
    ab = torch.randn(B, L, 2 * HV, generator=gen, device="cuda").to(torch.bfloat16)
    q = qkv[..., :HK * DK].unflatten(-1, (HK, DK))
    k = qkv[..., HK * DK:2 * HK * DK].unflatten(-1, (HK, DK))
    v = qkv[..., 2 * HK * DK:].unflatten(-1, (HV, DV))
    a, b = ab[..., :HV], ab[..., HV:]
    gates = (torch.randn(HV, generator=gen, device="cuda").to(torch.bfloat16),
             torch.randn(HV, generator=gen, device="cuda").to(torch.bfloat16))
    num_blocks = 1 + B * (L + 1)
    pool = torch.randn(num_blocks, HV, DV, DK, generator=gen, device="cuda") * 0.1
    slots = (torch.randperm(num_blocks - 1, generator=gen, device="cuda") + 1)[:B * (L + 1)].view(B, L + 1)
    src, dst = slots[:, 0].contiguous(), slots[:, 1:].contiguous()
    fresh = torch.zeros(B, dtype=torch.bool, device="cuda")
    save = torch.ones(B, L, dtype=torch.int32, device="cuda")
    accepted = torch.arange(B, device="cuda") % L
    return (q, k, v, a, b), gates, pool, src, fresh, dst, save, accepted


def _run(inputs, block_v: int, warps: int, commit_block_v: int | None = None):
    (q, k, v, a, b), gates, pool, src, fresh, dst, save, accepted = inputs
    B, L = q.shape[:2]
    keep = KeptInputs.empty(B, L, HK, DK, HV, DV, torch.bfloat16, torch.device("cuda"))
    work = pool.clone()

    def verify():
        return gs.gdn_snapshots(q, k, v, a, b, work, src, fresh, dst, save, gates=gates, keep=keep,
                                block_v=block_v, num_warps=warps)

    def commit():
        gs.gdn_commit(keep, work, src, fresh, dst, accepted, block_v=commit_block_v or block_v, num_warps=warps)

    o = verify()
    commit()
    states = work[dst.gather(1, accepted[:, None])[:, 0]].clone()
    return verify, commit, o, states


def _rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.double(), ref.double()
    return float((x - ref).norm() / ref.norm())


def _graphed_us(fn, calls: int = LAYERS) -> float:
    """Median microseconds of one call, from a CUDA graph of `calls` calls."""
    from triton.testing import do_bench_cudagraph

    def many():
        for _ in range(calls):
            fn()
    return do_bench_cudagraph(many, rep=200) * 1e3 / calls


def main() -> None:
    print(f"deferred verify + commit, one layer (Hk = Hv = {HV}, Dk = Dv = {DK}, L = {1 + K_SPEC}, bf16 inputs, "
          f"float32 states); defaults BLOCK_V = {gs.BLOCK_V}, COMMIT_BLOCK_V = {gs.COMMIT_BLOCK_V}, "
          f"NUM_WARPS = {gs.NUM_WARPS}")
    for B in (1, 8, 32):
        inputs = _inputs(B, seed=B)
        _, _, o_ref, s_ref = _run(inputs, gs.BLOCK_V, gs.NUM_WARPS, gs.COMMIT_BLOCK_V)
        rows = []
        for block_v, warps in itertools.product(BLOCK_VS, WARPS):
            verify, commit, o, states = _run(inputs, block_v, warps)
            t_v, t_c = _graphed_us(verify), _graphed_us(commit)
            rows.append((t_v, t_c, block_v, warps, max(_rel(o, o_ref), _rel(states, s_ref))))
            print(f"  B={B:<3} block_v={block_v:<3} warps={warps}  verify {t_v:7.1f} us  commit {t_c:7.1f} us  "
                  f"sum {t_v + t_c:7.1f} us  rel diff {rows[-1][4]:.1e}", flush=True)
        v, c = min(rows), min(rows, key=lambda r: r[1])
        print(f"  B={B}: fastest verify block_v={v[2]} warps={v[3]} ({v[0]:.1f} us), "
              f"commit block_v={c[2]} warps={c[3]} ({c[1]:.1f} us)")


if __name__ == "__main__":
    main()
