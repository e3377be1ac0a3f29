"""The host's share of a captured decode step, on any machine (not a test; prints figures).

    python benchmarks/host_step.py                    # tiny shapes, k = 8, c = 1, 8, 32
    python benchmarks/host_step.py --profile 32       # and a cProfile of 100 steps at c = 32

A graph step on a GPU is the device's replays plus the host's work around them (the scheduler,
the buffers' fill, the one read and its unpacking, the scheduler's update, the outputs), and
nothing overlaps the two yet, so every microsecond here is one of the step's. This runs the same
engine step on the CPU with the captured bodies (target, verify, drafter) replaced by nothing
after the requests reached decode: what is left is the host's work, at the prompt length of the
GPU benchmarks (1024 tokens) so per-request costs that grow with the sequence show. The result
buffer keeps the last real step's values, so every timed step accepts and drafts as that one did.
Medians of `--steps` steps; this host's figures are a few times the H200 host's, so compare
versions as ratios measured on one machine.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.decode_requests import to_decode  # noqa: E402
from engine_under_test.llm import LLM  # noqa: E402


def _engine(args, c: int):
    models = ROOT / "conformance" / "models"
    spec = {"method": "dflash", "model": str(models / "tiny-dflash"), "num_speculative_tokens": args.k}
    llm = LLM(models / "tiny-hybrid", spec, max_num_seqs=max(args.concurrency), max_model_len=4096,
              max_num_batched_tokens=8192, kv_cache_memory_bytes=1024 * 2**20, seed=0, load_format="dummy",
              enforce_eager=False)
    eng = llm.engine
    to_decode(eng, c, args.prompt_tokens, max_tokens=3000, extra_steps=2)
    graphs = eng.runner.graphs
    if graphs is None:
        raise SystemExit("host_step: no captured decode path (enforce_eager?)")
    graphs.bodies.target = lambda B: None                  # the device's work, gone
    graphs.bodies.verify = lambda B: None
    graphs.bodies.draft = lambda B, aux: None
    return eng


def _timed_steps(eng, num_steps: int) -> list[float]:
    """Wall time of each step; fails unless every step ran the captured path for every request."""
    graphs, counted = eng.runner.graphs, []
    run = graphs._execute_one_sync

    def counting(reqs, result, acceptance=None):
        counted.append(len(reqs))
        return run(reqs, result, acceptance)

    graphs._execute_one_sync = counting
    times = []
    for _ in range(num_steps):
        t0 = time.perf_counter()
        eng.step()
        times.append(time.perf_counter() - t0)
    graphs._execute_one_sync = run
    if len(counted) != num_steps or len(set(counted)) != 1:
        raise SystemExit(f"host_step: {num_steps} steps, {len(counted)} on the captured one-sync path "
                         f"(batch sizes {sorted(set(counted))})")
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--profile", type=int, metavar="C", help="also print a cProfile of 100 steps at this concurrency")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"host-only decode step (tiny shapes, k = {args.k}, prompts of {args.prompt_tokens} tokens, "
          f"median of {args.steps} steps)")
    for c in args.concurrency:
        eng = _engine(args, c)
        _timed_steps(eng, 5)
        times = _timed_steps(eng, args.steps)
        med = sorted(times)[len(times) // 2]
        print(f"  c={c:<3} {med * 1e6:8.1f} us a step, {med * 1e6 / c:6.1f} us a request", flush=True)
        if args.profile == c:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(100):
                eng.step()
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
