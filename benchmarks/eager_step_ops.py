"""How many ATen ops the reference engine dispatches in one step it runs eagerly (not a test; prints figures).

    python benchmarks/eager_step_ops.py                  # tiny shapes, k = 8, 1 / 4 / 16 requests
    python benchmarks/eager_step_ops.py --requests 1 32 --prompt-tokens 256

A step that no captured graph covers (a prefill, a mixed prefill + decode step) runs op by op: on a GPU
each op is at least one launch from the host, so the count bounds the step from below by the host's
time per op however small the batch. This counts the ops of each of the first steps of N requests of
the same prompt length (step 1: the prompts' prefill; later steps: decode, which a GPU replays from
captured graphs and the CPU runs op by op) with a TorchDispatchMode on the CPU, and prints the wall time
of each step on this machine (not the card's; the first step's includes one-time warm-up). Tiny shapes: the
count scales with the number of layers (tiny-hybrid has 8, the 2b shapes 24).
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine_under_test.llm import LLM, SamplingParams  # noqa: E402


class _OpCount(TorchDispatchMode):
    """Counts every ATen op dispatched inside it, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.by_name: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.by_name[str(func)] += 1
        return func(*args, **(kwargs or {}))


def _steps(num_requests: int, prompt_tokens: int, k: int, num_steps: int) -> list[tuple[int, float, _OpCount]]:
    models = ROOT / "conformance" / "models"
    spec = {"method": "dflash", "model": str(models / "tiny-dflash"), "num_speculative_tokens": k,
            "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 4.0}
    llm = LLM(models / "tiny-hybrid", spec, max_num_seqs=max(num_requests, 1), max_model_len=4096,
              max_num_batched_tokens=8192, kv_cache_memory_bytes=512 * 2**20, seed=0, load_format="dummy",
              enforce_eager=False)
    eng = llm.engine
    for i in range(num_requests):
        eng.add_request(str(i), [1 + (i + t) % 100 for t in range(prompt_tokens)],
                        SamplingParams(max_tokens=64, temperature=0))
    out = []
    for _ in range(num_steps):
        count = _OpCount()
        t0 = time.perf_counter()
        with count:
            eng.step()
        out.append((sum(count.by_name.values()), time.perf_counter() - t0, count))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--top", type=int, default=8, help="the most frequent ops of the prefill step")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"ATen ops per step (tiny shapes, k = {args.k}, prompts of {args.prompt_tokens} tokens; "
          f"step 1 is the prefill)")
    for n in args.requests:
        steps = _steps(n, args.prompt_tokens, args.k, args.steps)
        cells = ", ".join(f"step {i + 1}: {ops} ops {wall * 1e3:.1f} ms" for i, (ops, wall, _) in enumerate(steps))
        print(f"  {n:>3} request(s): {cells}", flush=True)
    top = steps[0][2].by_name.most_common(args.top)
    print("  the prefill step's most frequent ops: " + ", ".join(f"{name} {c}" for name, c in top))


if __name__ == "__main__":
    main()
