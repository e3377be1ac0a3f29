"""Where the decode / verify step's time goes on a GPU (not a test; prints tables).

    python benchmarks/gpu_profile.py --out DIR        # one H200: 2b shapes, bf16, k=8

For each concurrency: (1) the step split on the host clock, with a device sync after each part
(scheduler, target buffers + replay, then on the one-sync path the verify, commit and drafter replays
and the step's read; with --two-syncs the sampled-token read, verification, drafter buffers +
replay, the drafts' read; the engine's bookkeeping); (2) the device time of each captured graph
alone (CUDA events around replays, median); (3) the kernels the graphs replay, by name (the
profiler's trace of five replays, kernel time summed per name); (4) the kernels of one eager
step by name, for comparison. `--unfused` splits the fused projections again (one GEMM each)
and captures the graphs again, for an A/B of the fusion on one machine. Writes the full tables
and traces into --out and prints the top of each.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.decode_requests import to_decode  # noqa: E402
from engine_under_test.llm import LLM  # noqa: E402
from engine_under_test.model.fused_linear import set_fused  # noqa: E402
from engine_under_test.runtime.decode_graphs import capture_sizes  # noqa: E402


def _build(args) -> LLM:
    models = ROOT / "conformance" / "models"
    spec = {"method": "dflash", "model": str(models / "qwen35-2b-dflash-shaped"), "num_speculative_tokens": args.k}
    return LLM(models / "qwen35-2b-shaped", spec, max_num_seqs=args.max_num_seqs, max_model_len=args.max_model_len,
               max_num_batched_tokens=args.max_num_batched_tokens, device="cuda", dtype="bfloat16",
               load_format="dummy", seed=0, kv_cache_memory_bytes=args.pool_bytes)


def _split(eng, steps: int) -> dict[str, float]:
    """Median ms of each part of a step, with a device sync closing each part."""
    graphs = eng.runner.graphs
    parts: dict[str, list[float]] = defaultdict(list)
    sync = torch.cuda.synchronize
    fills, meta = graphs.fills, graphs.buffers.meta
    orig = {n: getattr(fills, n) for n in ("target", "draft")}

    def timed(name, fn):
        def run(*a, **kw):
            sync()
            t0 = time.perf_counter()
            out = fn(*a, **kw)
            sync()
            parts[name].append(time.perf_counter() - t0)
            return out
        return run

    fills.target = timed("fill_target", orig["target"])
    meta_fill = meta.fill
    meta.fill = timed("fill_target.copy_to_device", meta_fill)     # the pinned copy + its H2D, inside
    fills.draft = timed("verify+fill_draft", orig["draft"])
    timed_graphs = [(name, getattr(sg, name)) for sg in graphs.captured.by_size.values()
                    for name in ("target", "draft", "verify", "commit")]
    for name, g in timed_graphs:
        g.replay = timed(f"{name}_replay", g.replay)
    sched_orig = eng.scheduler.schedule
    eng.scheduler.schedule = timed("schedule", sched_orig)
    exe_orig = eng.runner.execute
    eng.runner.execute = timed("runner.execute", exe_orig)
    try:
        for _ in range(steps):
            sync()
            t0 = time.perf_counter()
            eng.step()
            sync()
            parts["step"].append(time.perf_counter() - t0)
    finally:
        fills.target, fills.draft = orig["target"], orig["draft"]
        del meta.fill
        for _, g in timed_graphs:
            del g.replay
        eng.scheduler.schedule = sched_orig
        eng.runner.execute = exe_orig
    return {n: 1e3 * sorted(v)[len(v) // 2] for n, v in parts.items()}


def _graph_device_ms(eng, c: int, reps: int) -> dict[str, float]:
    graphs = eng.runner.graphs
    sg = graphs.captured.by_size[graphs.geometry.size_for(c)]
    out = {}
    for name, g in (("target_graph", sg.target), ("verify_graph", sg.verify), ("commit_graph", sg.commit),
                    ("draft_graph", sg.draft)):
        times = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        out[name] = sorted(times)[len(times) // 2]
    return out


def _graph_kernels(eng, c: int, reps: int, trace_path: Path) -> list[dict]:
    """Kernels of the captured graphs' replays (the profiler's trace, kernel events by name)."""
    from torch.profiler import ProfilerActivity, profile

    graphs = eng.runner.graphs
    sg = graphs.captured.by_size[graphs.geometry.size_for(c)]
    gt, gv, gc, gd = sg.target, sg.verify, sg.commit, sg.draft
    gt.replay(), gv.replay(), gc.replay(), gd.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            gt.replay()
            gv.replay()
            gc.replay()
            gd.replay()
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(trace_path))
    total: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for ev in json.loads(trace_path.read_text()).get("traceEvents", []):
        if ev.get("cat") == "kernel":
            t = total[ev["name"]]
            t[0] += ev.get("dur", 0) / 1e3 / reps
            t[1] += 1
    rows = [{"kernel": k, "ms_per_step": v[0], "calls_per_step": v[1] / reps} for k, v in total.items()]
    return sorted(rows, key=lambda r: -r["ms_per_step"])


def _eager_kernels(eng, steps: int) -> list[dict]:
    from torch.profiler import ProfilerActivity, profile

    graphs = eng.runner.graphs
    graphs.enabled = False
    try:
        eng.step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                eng.step()
            torch.cuda.synchronize()
    finally:
        graphs.enabled = True
    total: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            t = total[ev.name]
            t[0] += ev.time_range.elapsed_us() / 1e3 / steps
            t[1] += 1
    rows = [{"kernel": k, "ms_per_step": v[0], "calls_per_step": v[1] / steps} for k, v in total.items()]
    return sorted(rows, key=lambda r: -r["ms_per_step"])


def _stack_limit_bytes() -> int | None:
    """The context's per-thread stack limit (cuCtxGetLimit(CU_LIMIT_STACK_SIZE)): the driver
    reserves it for every resident thread of the chip, outside the allocator."""
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    value = ctypes.c_size_t()
    return value.value if cuda.cuCtxGetLimit(ctypes.byref(value), 0) == 0 else None


def _memory(dev: torch.device) -> dict[str, int | None]:
    free, total = torch.cuda.mem_get_info(dev)
    return {"device_used_bytes": total - free, "torch_reserved_bytes": torch.cuda.memory_reserved(dev),
            "outside_allocator_bytes": total - free - torch.cuda.memory_reserved(dev),
            "stack_limit_bytes_per_thread": _stack_limit_bytes()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--max-num-seqs", type=int, default=32)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--max-num-batched-tokens", type=int, default=8192)
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--pool-bytes", type=int, default=16 * 2**30)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--top", type=int, default=25, help="graph kernels printed per concurrency")
    ap.add_argument("--eager-top", type=int, default=8, help="eager kernels printed per concurrency")
    ap.add_argument("--two-syncs", action="store_true", help="greedy steps verify on the host (the two-sync path)")
    ap.add_argument("--unfused", action="store_true",
                    help="one GEMM per projection (model/fused_linear.set_fused off; graphs captured again)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    llm = _build(args)
    eng = llm.engine
    if args.unfused:
        set_fused(eng.target, False)
        set_fused(eng.drafter, False)
        eng.runner.graphs = None
        torch.cuda.empty_cache()
        eng.runner.capture_decode_graphs(capture_sizes(args.max_num_seqs), args.max_model_len)
    eng.runner.graphs.one_sync = not args.two_syncs
    mem = _memory(torch.device("cuda"))
    print("memory after build and capture: " + ", ".join(f"{k} {v}" for k, v in mem.items()))
    report = {"memory_after_build": mem}
    for c in args.concurrency:
        to_decode(eng, c, args.prompt_tokens, max_tokens=4000, extra_steps=3)
        split = _split(eng, args.steps)
        dev = _graph_device_ms(eng, c, args.steps)
        graph_kernels = _graph_kernels(eng, c, 5, args.out / f"graph_trace_c{c}.json")
        kernels = _eager_kernels(eng, 2)
        for rid in list(eng.scheduler.requests):
            eng.abort_request(rid)
        eng.step()
        report[c] = {"split_ms": split, "graph_device_ms": dev, "graph_kernels": graph_kernels,
                     "eager_kernels": kernels}
        print(f"\n== c={c} ==")
        print("host split (ms, median, synced): " + ", ".join(f"{k} {v:.2f}" for k, v in split.items()))
        print("graph replay on device (ms): " + ", ".join(f"{k} {v:.3f}" for k, v in dev.items()))
        gtot = sum(r["ms_per_step"] for r in graph_kernels)
        print(f"graph replay kernels (target + verify + drafter): {gtot:.2f} ms of kernel time, "
              f"{sum(r['calls_per_step'] for r in graph_kernels):.0f} kernels")
        for r in graph_kernels[:args.top]:
            print(f"  {r['ms_per_step']:7.3f} ms {r['calls_per_step']:6.0f}x  {r['kernel'][:110]}")
        tot = sum(r["ms_per_step"] for r in kernels)
        print(f"eager step kernels: {tot:.2f} ms of device time, {sum(r['calls_per_step'] for r in kernels):.0f} launches")
        for r in kernels[:args.eager_top]:
            print(f"  {r['ms_per_step']:7.3f} ms {r['calls_per_step']:6.0f}x  {r['kernel'][:110]}")
    report["memory_after_steps"] = _memory(torch.device("cuda"))
    print("memory after the steps: " + ", ".join(f"{k} {v}" for k, v in report["memory_after_steps"].items()))
    (args.out / "gpu_profile.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
