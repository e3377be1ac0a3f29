"""GPU step-time and memory benchmark of the reference engine's runtime (not a test).

    python benchmarks/gpu_runtime.py --out DIR                   # one H200: 2b shapes, bf16, k=8
    python benchmarks/gpu_runtime.py --device cpu --tiny --out DIR   # tiny shapes on a CPU (CI-sized)

For each max_num_seqs (8, 32) at gpu_memory_utilization (0.9): build the engine with seeded
weights (2b: qwen35-2b-shaped + qwen35-2b-dflash-shaped, bf16), check greedy speculative ==
non-speculative tokens on a small batch, measure peak device memory (torch
max_memory_reserved and NVML) against utilization x capacity and against the planner's ledger
(pool and weights must be within 5%), and time decode steps at c = 1, 8, 32 next to the
memory-bandwidth floor (bytes a step must move: weights + KV read + recurrent state read and
snapshot writes, at 4.2 TB/s). Writes one run observation per max_num_seqs (observation
schema, mode "run") into --out and prints a summary. Exits non-zero if a check fails.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine_under_test import __version__  # noqa: E402
from engine_under_test.llm import LLM, SamplingParams  # noqa: E402
from engine_under_test.shapes import DTYPE_SIZE_BYTES  # noqa: E402

BANDWIDTH_BYTES_PER_S = 4.2e12      # measured device-to-device copy on one H200
LEDGER_TOLERANCE = 0.05


def _nvml_used_bytes(device_index: int) -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(device_index)).used)
    except Exception:  # NVML absent (CPU runs): reported as null
        return None


def _build(args, spec: bool, max_num_seqs: int) -> LLM:
    models = ROOT / "conformance" / "models"
    target = models / ("tiny-hybrid" if args.tiny else "qwen35-2b-shaped")
    draft = models / ("tiny-dflash" if args.tiny else "qwen35-2b-dflash-shaped")
    memory = ({"gpu_memory_utilization": args.gpu_memory_utilization} if args.device.startswith("cuda")
              else {"kv_cache_memory_bytes": args.cpu_pool_bytes})
    return LLM(target, {"method": "dflash", "model": str(draft), "num_speculative_tokens": args.k} if spec else None,
               max_num_seqs=max_num_seqs, max_model_len=args.max_model_len, max_num_batched_tokens=args.max_num_batched_tokens,
               device=args.device, dtype="float32" if args.device == "cpu" else "bfloat16", load_format="dummy",
               seed=args.seed, **memory)


def _free(llm: LLM | None) -> None:
    del llm
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _lossless(args, max_num_seqs: int) -> tuple[bool, LLM]:
    rng = random.Random(args.seed)
    prompts = [[rng.randrange(2, 1000) for _ in range(n)] for n in (7, 33, 64, 20)]
    params = [SamplingParams(max_tokens=n, temperature=0, ignore_eos=True) for n in (12, 20, 8, 16)]
    base = _build(args, False, max_num_seqs)
    ref = [o.output_token_ids for o in base.generate(prompts, params)]
    _free(base)
    llm = _build(args, True, max_num_seqs)
    got = [o.output_token_ids for o in llm.generate(prompts, params)]
    return got == ref, llm


def _floor_bytes(llm: LLM, contexts: list[int]) -> int:
    eng = llm.engine
    k = eng.cfg.num_speculative_tokens
    weights = sum(p.numel() * p.element_size() for p in eng.target.parameters())
    weights += sum(p.numel() * p.element_size() for p in eng.drafter.parameters())
    kv_per_token = 0
    for cache in eng.runner.kv.values():
        kv_per_token += 2 * cache.first[0, 0].numel() * cache.first.element_size()
    state = sum(c.first[0].numel() * c.first.element_size() + c.second[0].numel() * c.second.element_size()
                for c in eng.runner.state.values())
    kv = sum(n * kv_per_token for n in contexts)
    return weights + kv + len(contexts) * state * (1 + (k + 1))   # read once, snapshot k + 1 positions


def _step_times(args, llm: LLM, concurrency: int) -> dict:
    eng = llm.engine
    rng = random.Random(concurrency)
    for i in range(concurrency):
        eng.add_request(f"c{concurrency}-{i}", [rng.randrange(2, 1000) for _ in range(args.prompt_tokens)],
                        SamplingParams(max_tokens=args.warmup_steps * (args.k + 1) + args.timed_steps * (args.k + 1) + 8,
                                       temperature=0, ignore_eos=True))
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    for _ in range(args.warmup_steps):          # prefill and first decode steps
        eng.step()
    times, tokens = [], 0
    for _ in range(args.timed_steps):
        sync()
        t0 = time.perf_counter()
        outs = eng.step()
        sync()
        times.append(time.perf_counter() - t0)
        tokens += sum(len(o.new_token_ids) for o in outs)
    contexts = [r.num_computed_tokens for r in eng.scheduler.running]
    for rid in list(eng.scheduler.requests):
        eng.abort_request(rid)
    step_s = sorted(times)[len(times) // 2]
    floor_s = _floor_bytes(llm, contexts) / BANDWIDTH_BYTES_PER_S
    return {"concurrency": concurrency, "median_step_s": step_s, "floor_s": floor_s, "ratio_to_floor": step_s / floor_s,
            "output_tok_per_s": tokens / sum(times), "num_running": len(contexts)}


def run_one(args, max_num_seqs: int) -> dict:
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    ok, llm = _lossless(args, max_num_seqs)
    eng = llm.engine
    rungs = [_step_times(args, llm, c) for c in args.concurrency if c <= max_num_seqs]
    ledger = eng.plan.memory.ledger
    pool_bytes = eng.plan.pool.tensor.numel()
    # NOTE: on a CPU the weights run in float32 while the ledger counts the checkpoint dtype;
    # the comparison then uses the checkpoint dtype's size (the parameter count is what is checked)
    ledger_size = DTYPE_SIZE_BYTES[eng.plan.target.dtype]
    params = list(eng.target.parameters()) + list(eng.drafter.parameters())
    weights_bytes = sum(p.numel() * (p.element_size() if cuda else ledger_size) for p in params)
    capacity = torch.cuda.mem_get_info()[1] if cuda else None
    mem = {
        "bound_bytes": ledger.bound_bytes, "ledger": dict(ledger.categories),
        "pool_allocated_bytes": pool_bytes, "weights_allocated_bytes": weights_bytes,
        "pool_vs_ledger": pool_bytes / max(ledger.pool_bytes, 1) - 1,
        "weights_vs_ledger": weights_bytes / max(ledger.categories["weights"], 1) - 1,
        "torch_max_memory_reserved_bytes": torch.cuda.max_memory_reserved() if cuda else None,
        "nvml_used_bytes": _nvml_used_bytes(torch.cuda.current_device()) if cuda else None,
        "utilization_x_capacity_bytes": int(args.gpu_memory_utilization * capacity) if cuda else None,
    }
    checks = {"lossless": ok,
              "pool_within_ledger": abs(mem["pool_vs_ledger"]) <= LEDGER_TOLERANCE,
              "weights_within_ledger": abs(mem["weights_vs_ledger"]) <= LEDGER_TOLERANCE}
    if cuda:
        checks["reserved_within_bound"] = mem["torch_max_memory_reserved_bytes"] <= mem["utilization_x_capacity_bytes"]
        if mem["nvml_used_bytes"] is not None:
            checks["nvml_within_bound"] = mem["nvml_used_bytes"] <= mem["utilization_x_capacity_bytes"]
    failed = [name for name, passed in checks.items() if not passed]
    obs = {
        "schema_version": "1", "case_id": f"gpu-runtime-{'tiny' if args.tiny else '2b'}-k{args.k}-seqs{max_num_seqs}",
        "engine": {"name": "reference", "version": __version__}, "mode": "run",
        "status": "error" if failed else "ok", "message": f"failed checks: {', '.join(failed)}" if failed else None,
        "device": {"profile": "h200", "hardware": torch.cuda.get_device_name() if cuda else "cpu"},
        "budget": eng.plan.budget.to_json(), "memory": None, "trace": None,
        "throughput": {"rungs": [{"concurrency": r["concurrency"], "status": "ok",
                                  "output_tok_per_s": r["output_tok_per_s"]} for r in rungs]},
        "provenance": {
            "functions": ["engine_under_test.engine.LLMEngine.step", "engine_under_test.memory.planner.plan_memory"],
            "overrides": [{"name": "load_format", "value": "dummy", "reason": "seeded random weights of the shapes"}],
            "glue": [{"name": "benchmarks/gpu_runtime.py", "description": "times engine steps after warm-up; "
                      "bandwidth floor = (weights + KV read + state read and k+1 snapshot writes) / 4.2 TB/s"}]},
        "timing": {"rungs": rungs, "memory": mem, "checks": checks},
    }
    _free(llm)
    return obs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for the run observations (JSON)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (CPU-sized)")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--max-num-seqs", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    ap.add_argument("--cpu-pool-bytes", type=int, default=64 * 2**20)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--max-num-batched-tokens", type=int, default=8192)
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--warmup-steps", type=int, default=4)
    ap.add_argument("--timed-steps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device: use --device cpu --tiny", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    status = 0
    for n in args.max_num_seqs:
        obs = run_one(args, n)
        try:
            from conformance.observation import validate

            validate(obs, f"benchmarks/gpu_runtime.py seqs={n}")
        except ImportError:   # jsonschema absent on the device machine: validate where it is installed
            pass
        path = args.out / f"{obs['case_id']}.json"
        path.write_text(json.dumps(obs, indent=1))
        t = obs["timing"]
        print(f"max_num_seqs {n}: status {obs['status']} {obs['message'] or ''}")
        print(f"  memory: pool {t['memory']['pool_vs_ledger']:+.2%} vs ledger, weights {t['memory']['weights_vs_ledger']:+.2%}, "
              f"reserved {t['memory']['torch_max_memory_reserved_bytes']} nvml {t['memory']['nvml_used_bytes']} "
              f"bound {t['memory']['utilization_x_capacity_bytes']}")
        for r in t["rungs"]:
            print(f"  c={r['concurrency']:>3}: step {r['median_step_s'] * 1e3:8.2f} ms  floor {r['floor_s'] * 1e3:7.3f} ms  "
                  f"ratio {r['ratio_to_floor']:7.1f}x  {r['output_tok_per_s']:9.1f} tok/s")
        print(f"  wrote {path}")
        status |= obs["status"] != "ok"
    return status


if __name__ == "__main__":
    sys.exit(main())
