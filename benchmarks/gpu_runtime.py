"""GPU step-time and memory benchmark of the reference engine's runtime (not a test).

    python benchmarks/gpu_runtime.py --out DIR                   # one H200: 2b shapes, bf16, k=8
    python benchmarks/gpu_runtime.py --device cpu --tiny --out DIR   # tiny shapes on a CPU (CI-sized)

For each max_num_seqs (8, 32): (1) lossless: greedy speculative (k = 4 and 8) == greedy
non-speculative tokens for requests of different prompt and output lengths, in float32 (bf16
on a GPU is not bitwise deterministic across batch shapes, so near-tied greedy tokens can
flip; the bf16 comparison is reported beside it, not checked); (2) the bf16 engine at
gpu_memory_utilization 0.9: peak device memory (torch max_memory_reserved, and this process's
NVML footprint) against utilization x capacity, and what the allocator handed the pool and the
weights against the planner's ledger (within 5%); (3) decode step times at c = 1, 8, 32 for
each variant beside the floor (gpu_probe.step_floors at the measured copy bandwidth and bf16
matrix rate): "pipelined" (the captured step under async scheduling, step n + 1 launched before
step n is read; the lossless engines then run pipelined too), "graphs" (the captured step, each
step read before the next), "eager" (the torch reference path), "fla_per_position". Writes one run observation per max_num_seqs (observation
schema, mode "run") into --out, prints a summary; exits non-zero if a check fails.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import time
from pathlib import Path

# NOTE: the allocator the engine is measured under: expandable segments (no fragmentation of
# cached blocks between differently sized activations); set before CUDA initialises
os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import gpu_probe  # noqa: E402
from conformance.adapters.reference.plan import _memory as memory_section  # noqa: E402
from engine_under_test import __version__  # noqa: E402
from engine_under_test.llm import LLM, SamplingParams  # noqa: E402
from engine_under_test.memory.planner import graph_pool_bytes  # noqa: E402
from engine_under_test.shapes import DTYPE_SIZE_BYTES  # noqa: E402

# variant -> gated delta rule backend on CUDA; "graphs" replays the captured decode step, the
# others run it eagerly (the torch reference path)
VARIANT_BACKENDS = {"graphs": "fla", "pipelined": "fla", "eager": "fla", "fla_per_position": "fla_per_position"}
# "pipelined": the graphs with async scheduling's pipeline (step n + 1 launched before step n is
# read: engine.py), timed as the wall time of windows of steps with no sync between them
PIPELINED_WINDOWS = 3
H200_CEILINGS = {"copy_bytes_per_s": 4.23e12, "bf16_matmul_flop_per_s": 795e12}   # shared/GPU.md, one H200
LEDGER_TOLERANCE = 0.05
LOSSLESS_PROMPT_TOKENS = (7, 33, 130, 20, 64)
LOSSLESS_OUTPUT_TOKENS = (12, 20, 9, 24, 16)


def _build(args, k: int, max_num_seqs: int, dtype: str, small: bool) -> LLM:
    models = ROOT / "conformance" / "models"
    target = models / ("tiny-hybrid" if args.tiny else "qwen35-2b-shaped")
    draft = models / ("tiny-dflash" if args.tiny else "qwen35-2b-dflash-shaped")
    cuda = args.device.startswith("cuda")
    memory = ({"gpu_memory_utilization": args.gpu_memory_utilization} if cuda and not small
              else {"kv_cache_memory_bytes": args.small_pool_bytes if small else args.cpu_pool_bytes})
    spec = {"method": "dflash", "model": str(draft), "num_speculative_tokens": k} if k else None
    return LLM(target, spec, max_num_seqs=max_num_seqs,
               max_model_len=args.lossless_max_model_len if small else args.max_model_len,
               max_num_batched_tokens=args.lossless_max_num_batched_tokens if small else args.max_num_batched_tokens,
               device=args.device, dtype=dtype, load_format="dummy", seed=args.seed,
               async_scheduling="pipelined" in args.variants, **memory)


def _release() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _generate(args, k: int, max_num_seqs: int, dtype: str) -> tuple[list[list[int]], dict]:
    rng = random.Random(args.seed)
    prompts = [[rng.randrange(2, 1000) for _ in range(n)] for n in LOSSLESS_PROMPT_TOKENS]
    params = [SamplingParams(max_tokens=n, temperature=0, ignore_eos=True) for n in LOSSLESS_OUTPUT_TOKENS]
    llm = _build(args, k, max_num_seqs, dtype, small=True)
    tokens = [o.output_token_ids for o in llm.generate(prompts, params)]
    s = llm.engine.stats()
    del llm
    _release()
    return tokens, {"num_steps": s.num_steps, "num_draft_tokens": s.num_draft_tokens,
                    "num_accepted_tokens": s.num_accepted_tokens}


def _first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


def lossless(args, max_num_seqs: int) -> dict:
    """{dtype: {"k=K": {...}}}: the checked float32 comparison and the reported bf16 one."""
    out = {}
    for dtype in args.lossless_dtypes:
        ref, _ = _generate(args, 0, max_num_seqs, dtype)
        out[dtype] = {}
        for k in args.lossless_k:
            got, stats = _generate(args, k, max_num_seqs, dtype)
            out[dtype][f"k={k}"] = {"identical": got == ref, **stats,
                                    "first_difference": [_first_difference(g, r) for g, r in zip(got, ref)]}
    return out


def _in_prefill(eng) -> bool:
    sched = eng.scheduler
    return bool(sched.waiting) or any(r.num_computed_tokens < r.num_prompt_tokens for r in sched.running)


def step_times(args, llm: LLM, concurrency: int, ceil: dict, peak: dict, pipelined: bool = False) -> dict:
    """Median step time after prefill and warm-up: each step alone between device syncs, or
    (`pipelined`) the wall time of windows of `timed_steps` steps with no sync between them over
    their step count, the median window (a pipelined step overlaps the next one's host work)."""
    eng = llm.engine
    rng = random.Random(concurrency)
    num_timed = args.timed_steps * (PIPELINED_WINDOWS if pipelined else 1)
    max_tokens = (args.warmup_steps + num_timed + 4) * (args.k + 1) + 8
    for i in range(concurrency):
        eng.add_request(f"c{concurrency}-{i}-{eng.target.gdn_backend}-{time.perf_counter_ns()}", [rng.randrange(2, 1000) for _ in range(args.prompt_tokens)],
                        SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True))
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    while _in_prefill(eng):                     # prefill, not timed
        eng.step()
    for _ in range(args.warmup_steps):          # first decode steps (kernel compilation)
        eng.step()
    times, tokens = [], 0
    for _ in range(PIPELINED_WINDOWS if pipelined else args.timed_steps):
        sync()
        t0 = time.perf_counter()
        for _ in range(args.timed_steps if pipelined else 1):
            outs = eng.step()
            tokens += sum(len(o.new_token_ids) for o in outs)
        sync()
        elapsed = time.perf_counter() - t0
        times += [elapsed / args.timed_steps] * args.timed_steps if pipelined else [elapsed]
        if cuda:
            _sample_nvml(peak)
    contexts = [r.num_computed_tokens for r in eng.scheduler.running]
    for rid in list(eng.scheduler.requests):
        eng.abort_request(rid)
    step_s = sorted(times)[len(times) // 2]
    floors = gpu_probe.step_floors(eng, contexts, ceil)
    graphs = eng.runner.graphs
    variant = "graphs" if graphs is not None and graphs.enabled else ("eager" if eng.target.gdn_backend in ("fla", "torch")
                                                                     else eng.target.gdn_backend)
    if pipelined and variant == "graphs":
        variant = "pipelined"
    return {"variant": variant, "concurrency": concurrency, "num_running": len(contexts),
            "median_step_s": step_s, "min_step_s": min(times), **floors, "ratio_to_floor": step_s / floors["floor_s"],
            "output_tok_per_s": tokens / sum(times), "tokens_per_step": tokens / len(times)}


def _sample_nvml(peak: dict) -> None:
    now = gpu_probe.nvml_memory()
    if now is None:
        return
    for key, value in now.items():
        if value is not None:
            peak[key] = max(peak.get(key) or 0, value)


def _phase(name: str, phases: list, peak: dict) -> None:
    _sample_nvml(peak)
    phases.append({"phase": name, "torch_max_memory_reserved_bytes": torch.cuda.max_memory_reserved(),
                   "torch_max_memory_allocated_bytes": torch.cuda.max_memory_allocated(),
                   "torch_memory_allocated_bytes": torch.cuda.memory_allocated(),
                   "nvml_device_used_bytes": (gpu_probe.nvml_memory() or {}).get("device_used_bytes")})


def run_one(args, max_num_seqs: int, ceil: dict, nvml: dict, hw: tuple[str, dict]) -> dict:
    cuda = args.device.startswith("cuda")
    checked = "float32"
    checks: dict[str, bool] = {}
    # NOTE: the measured engine first, in a process that has built no other engine: its NVML
    # footprint is then what a serving process holds (the lossless engines' graphs, handles and
    # kernels would otherwise stay resident beside it); the lossless engines run after it is freed
    _release()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    llm = _build(args, args.k, max_num_seqs, "float32" if not cuda else "bfloat16", small=False)
    eng = llm.engine
    peak: dict = {}
    phases: list = []
    if cuda:
        _phase("built", phases, peak)
    if cuda:
        _phase("graphs captured", phases, peak)
    rungs = []
    graphs = eng.runner.graphs
    for variant in args.variants:
        eng.target.gdn_backend = VARIANT_BACKENDS[variant] if cuda else "torch"
        if graphs is not None:
            graphs.enabled = variant in ("graphs", "pipelined")
        eng.pipelined = variant == "pipelined"
        for c in args.concurrency:
            if c <= max_num_seqs:
                rungs.append(step_times(args, llm, c, ceil, peak, pipelined=variant == "pipelined"))
                if cuda:
                    _phase(f"{variant} c={c}", phases, peak)
    eng.target.gdn_backend = VARIANT_BACKENDS[args.variants[0]] if cuda else "torch"
    ledger = eng.plan.memory.ledger
    size = gpu_probe.param_bytes(eng.target) + gpu_probe.param_bytes(eng.drafter)
    measured = eng.measured_bytes or {"pool_bytes": eng.plan.pool.tensor.numel() * eng.plan.pool.tensor.element_size(),
                                      "weights_bytes": size}
    if not cuda:   # NOTE: CPU weights run in float32; the ledger counts the checkpoint dtype's bytes
        num_params = sum(p.numel() for p in eng.target.parameters()) + sum(p.numel() for p in eng.drafter.parameters())
        measured["weights_bytes"] = num_params * DTYPE_SIZE_BYTES[eng.plan.target.dtype]
    capacity = eng.cfg.device_memory_bytes
    mem = {
        "bound_bytes": ledger.bound_bytes, "ledger": dict(ledger.categories), "ledger_pool_bytes": ledger.pool_bytes,
        "measured_pool_bytes": measured["pool_bytes"], "measured_weights_bytes": measured["weights_bytes"],
        "pool_vs_ledger": measured["pool_bytes"] / ledger.pool_bytes - 1,
        "weights_vs_ledger": measured["weights_bytes"] / ledger.categories["weights"] - 1,
        "capacity_bytes": capacity,
        "utilization_x_capacity_bytes": int(args.gpu_memory_utilization * capacity) if cuda else None,
        "torch_max_memory_reserved_bytes": torch.cuda.max_memory_reserved() if cuda else None,
        "torch_max_memory_allocated_bytes": torch.cuda.max_memory_allocated() if cuda else None,
        "nvml_before_cuda": nvml["before_cuda"], "nvml_after_cuda_init": nvml["after_init"], "nvml_peak": peak or None,
        "phases": phases,
    }
    if cuda and peak and nvml["after_init"]:
        # vLLM's accounting (gpu_worker: the init snapshot after the CUDA context and cuBLAS
        # handles is the baseline; util x total bounds what the engine adds past it)
        mem["nvml_increase_past_init_bytes"] = peak["device_used_bytes"] - nvml["after_init"]["device_used_bytes"]
        mem["cuda_context_bytes"] = nvml["after_init"]["device_used_bytes"] - nvml["before_cuda"]["device_used_bytes"]
        mem["nvml_footprint_with_context_bytes"] = peak["device_used_bytes"] - nvml["before_cuda"]["device_used_bytes"]
    mem["cuda_graph_bytes"] = (eng.measured_bytes or {}).get("cuda_graph_bytes")
    mem["ledger_graph_pool_bytes"] = graph_pool_bytes(eng.cfg, eng.plan.target)
    if mem["cuda_graph_bytes"] is not None:
        checks["graphs_within_ledger"] = mem["cuda_graph_bytes"] <= mem["ledger_graph_pool_bytes"]
    checks["pool_within_ledger"] = abs(mem["pool_vs_ledger"]) <= LEDGER_TOLERANCE
    checks["weights_within_ledger"] = abs(mem["weights_vs_ledger"]) <= LEDGER_TOLERANCE
    if cuda:
        bound = mem["utilization_x_capacity_bytes"]
        checks["reserved_within_bound"] = mem["torch_max_memory_reserved_bytes"] <= bound
        if "nvml_footprint_with_context_bytes" in mem:
            # the process's whole device footprint, CUDA context included (the planner reserves it)
            checks["nvml_within_bound"] = mem["nvml_footprint_with_context_bytes"] <= bound
    budget_json, memory_json = eng.plan.budget.to_json(), memory_section(eng.plan)
    del llm, eng, graphs
    _release()
    ll = lossless(args, max_num_seqs)
    checks = {f"lossless_{checked}_{key.replace('=', '')}": r["identical"] for key, r in ll[checked].items()} | checks
    failed = [name for name, passed in checks.items() if not passed]
    main = [r for r in rungs if r["variant"] == args.variants[0]]
    obs = {
        "schema_version": "1", "case_id": f"gpu-runtime-{'tiny' if args.tiny else '2b'}-k{args.k}-seqs{max_num_seqs}",
        "engine": {"name": "reference", "version": __version__}, "mode": "run",
        "status": "error" if failed else "ok", "message": f"failed checks: {', '.join(failed)}" if failed else None,
        "device": {"profile": "h200", "hardware": hw[0]},
        "budget": budget_json, "memory": memory_json, "trace": None,
        "throughput": {"rungs": [{"concurrency": r["concurrency"], "status": "ok",
                                  "output_tok_per_s": r["output_tok_per_s"]} for r in main]},
        "provenance": {
            "functions": ["engine_under_test.engine.LLMEngine.step", "engine_under_test.memory.planner.plan_memory"],
            "overrides": [{"name": "load_format", "value": "dummy", "reason": "seeded random weights of the shapes"}],
            "glue": [{"name": "benchmarks/gpu_runtime.py", "description": "lossless comparison, step timing after "
                      "prefill and warm-up, peak memory; floors from benchmarks/gpu_probe.py at the measured ceilings"}]},
        "timing": {"rungs": rungs, "memory": mem, "checks": checks, "lossless": ll, "ceilings": ceil,
                   "hardware": hw[1], "config": {"k": args.k, "max_num_seqs": max_num_seqs,
                                                 "max_model_len": args.max_model_len, "prompt_tokens": args.prompt_tokens,
                                                 "max_num_batched_tokens": args.max_num_batched_tokens,
                                                 "gpu_memory_utilization": args.gpu_memory_utilization,
                                                 "pytorch_cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")}},
    }
    return obs


def _summary(obs: dict) -> list[str]:
    t = obs["timing"]
    m = t["memory"]
    gib = lambda n: "-" if n is None else f"{n / 2**30:.2f} GiB"  # noqa: E731
    lines = [f"{obs['case_id']}: status {obs['status']} {obs['message'] or ''}",
             f"  lossless: " + ", ".join(f"{d} {k} {'identical' if r['identical'] else 'DIFFERENT ' + str(r['first_difference'])}"
                                         f" ({r['num_accepted_tokens']}/{r['num_draft_tokens']} drafts accepted)"
                                         for d, by_k in t["lossless"].items() for k, r in by_k.items()),
             f"  memory: pool {m['pool_vs_ledger']:+.3%} vs ledger, weights {m['weights_vs_ledger']:+.3%}; "
             f"reserved peak {gib(m['torch_max_memory_reserved_bytes'])}, allocated peak {gib(m['torch_max_memory_allocated_bytes'])}, "
             f"nvml past init {gib(m.get('nvml_increase_past_init_bytes'))} (with the CUDA context "
             f"{gib(m.get('nvml_footprint_with_context_bytes'))}), bound {gib(m['utilization_x_capacity_bytes'])}",
             f"  CUDA graphs: {gib(m.get('cuda_graph_bytes'))} captured, ledger's graph pool {gib(m['ledger_graph_pool_bytes'])}",
             f"  {'variant':<17} {'c':>3} {'step ms':>9} {'floor ms':>9} {'mem fl':>7} {'cmp fl':>7} {'ratio':>7} {'tok/step':>8} {'tok/s':>9}"]
    for r in t["rungs"]:
        lines.append(f"  {r['variant']:<17} {r['concurrency']:>3} {r['median_step_s'] * 1e3:9.2f} {r['floor_s'] * 1e3:9.3f} "
                     f"{r['memory_floor_s'] * 1e3:7.3f} {r['compute_floor_s'] * 1e3:7.3f} {r['ratio_to_floor']:6.1f}x "
                     f"{r['tokens_per_step']:8.2f} {r['output_tok_per_s']:9.1f}")
    by = {(r["variant"], r["concurrency"]): r for r in t["rungs"]}
    for (variant, c), r in by.items():
        if variant in ("graphs", "pipelined") and ("eager", c) in by:
            e = by[("eager", c)]
            lines.append(f"  c={c}: {variant} {r['median_step_s'] * 1e3:.2f} ms ({r['ratio_to_floor']:.2f}x floor) vs eager "
                         f"{e['median_step_s'] * 1e3:.2f} ms ({e['ratio_to_floor']:.2f}x): {e['median_step_s'] / r['median_step_s']:.2f}x faster")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for the run observations (JSON)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (CPU-sized)")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--lossless-k", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--lossless-dtypes", nargs="+", default=None, help="float32 is checked; others are reported")
    ap.add_argument("--variants", nargs="+", default=None, help="gated delta rule backends to time")
    ap.add_argument("--max-num-seqs", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    ap.add_argument("--cpu-pool-bytes", type=int, default=64 * 2**20)
    ap.add_argument("--small-pool-bytes", type=int, default=2 * 2**30, help="pool of the lossless engines")
    ap.add_argument("--lossless-max-model-len", type=int, default=512)
    ap.add_argument("--lossless-max-num-batched-tokens", type=int, default=96)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--max-num-batched-tokens", type=int, default=8192)
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--timed-steps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print("no CUDA device: use --device cpu --tiny", file=sys.stderr)
        return 2
    args.lossless_dtypes = args.lossless_dtypes or (["float32", "bfloat16"] if cuda else ["float32"])
    args.variants = args.variants or (["pipelined", "graphs", "eager"] if cuda else ["eager"])
    unknown = set(args.variants) - set(VARIANT_BACKENDS)
    if unknown:
        ap.error(f"--variants: unknown {sorted(unknown)} (known: {', '.join(VARIANT_BACKENDS)})")
    if "float32" not in args.lossless_dtypes:
        ap.error("--lossless-dtypes must include float32 (the checked comparison)")
    nvml = {"before_cuda": gpu_probe.nvml_memory() if cuda else None, "after_init": None}
    if cuda:
        # NOTE: float32 means IEEE float32 here (the lossless engines): no TF32 in matmuls or convolutions
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        x = torch.ones(16, 16, dtype=torch.bfloat16, device="cuda")   # the CUDA context and cuBLAS handles
        torch.nn.functional.linear(torch.mm(x, x), x, x[0])
        del x
        _release()
        nvml["after_init"] = gpu_probe.nvml_memory()
    hw = gpu_probe.hardware(args.device)
    ceil = gpu_probe.ceilings() if cuda else dict(H200_CEILINGS)
    args.out.mkdir(parents=True, exist_ok=True)
    status, lines = 0, [f"hardware: {hw[0]}",
                        f"ceilings: copy {ceil['copy_bytes_per_s'] / 1e12:.2f} TB/s, bf16 matmul {ceil['bf16_matmul_flop_per_s'] / 1e12:.0f} TFLOP/s"]
    for n in args.max_num_seqs:
        obs = run_one(args, n, ceil, nvml, hw)
        try:
            from conformance.documents.observation import validate

            validate(obs, f"benchmarks/gpu_runtime.py seqs={n}")
        except ImportError:   # jsonschema absent on the device machine: validate where it is installed
            pass
        path = args.out / f"{obs['case_id']}.json"
        path.write_text(json.dumps(obs, indent=1))
        lines += _summary(obs) + [f"  wrote {path}"]
        print("\n".join(_summary(obs)), flush=True)
        status |= obs["status"] != "ok"
    print("\n== summary ==\n" + "\n".join(lines))
    return status


if __name__ == "__main__":
    sys.exit(main())
