"""Where a wave of c = 32 prompts spends its eager steps (not a test; prints tables).

    python benchmarks/mixed_step_profile.py --out DIR              # one GPU: 2b shapes, bf16, k = 8
    python benchmarks/mixed_step_profile.py --tiny --device cpu    # the script itself, on a CPU

The served ladder's c = 32 rung sends 32 prompts of 512 tokens at once; with a step budget of 8,192
tokens the engine prefills them over two steps and a short third one (each step's prompt chunks one
prefill graph replay: 16 new prompts, then 16 beside the decode rows, then one request's last chunk;
replays one after another when arrivals leave a later chunk beside new prompts), before the captured
decode steps. This runs that wave in-process on the
engine (`LLM`, dummy weights, synthetic acceptance of mean length 4) `--waves` times and prints, per
step of the last wave: the host wall time with a device sync after the step, the tokens it scheduled
(prompt and decode rows), whether a captured graph ran it (whole, or its decode rows beside an eager
pass over its prompt chunks: a split mixed step; prompt chunks on a prefill graph),
and the ATen ops it dispatched, eager and in the fixed-shape passes (`--whole-mixed-steps` runs mixed
steps as one eager pass, `--equal-length-groups` groups only equal query lengths, `--eager-prefill`
runs every prompt chunk eagerly: each as before, to compare; `--concurrency 1` is one prompt's
prefill, the c = 1 rung's first token; `--requests-per-slot 2` sends each slot's second prompt when
its first finishes, as the live ladder's closed-loop workers do, and the wave line counts the steps
by the prompt chunks they hold).
The eager steps of the last wave are then run again under torch.profiler (a fresh wave): their ATen
ops by count and by host time, the CUDA kernels launched (by count, by device time, and the device
time by kind of kernel: GEMMs, attention, copies and gathers, torch's elementwise and reductions,
Triton's), and the device's busy time against the
step's wall time (a step whose device is busy for a small part of its wall time is bound by the host's
launches). On CUDA each step also records the allocator's peak of live tensors above the step's start
(its activations: what `memory/planner.py` `activation_bytes` estimates) and how much its reservation
grew (what the process's footprint grows by). Tables go to stdout and DIR/mixed-steps.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine_under_test.llm import LLM, SamplingParams  # noqa: E402


class _OpCount(TorchDispatchMode):
    """Counts the ATen ops dispatched inside it, and apart those of the fixed-shape decode pass
    (`in_fixed` set by `_StepLog`): on CUDA that pass is graph replays, which dispatch no op of
    their bodies; on a CPU its bodies run op by op, so those counts say what CUDA would replay."""

    def __init__(self) -> None:
        super().__init__()
        self.count = self.fixed = 0
        self.in_fixed = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        self.fixed += self.in_fixed
        return func(*args, **(kwargs or {}))


def _build(args) -> LLM:
    models = ROOT / "conformance" / "models"
    target, draft = ("tiny-hybrid", "tiny-dflash") if args.tiny else ("qwen35-2b-shaped", "qwen35-2b-dflash-shaped")
    spec = {"method": "dflash", "model": str(models / draft), "num_speculative_tokens": args.k,
            "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 4.0}
    return LLM(models / target, spec, max_num_seqs=args.concurrency, max_model_len=4096,
               max_num_batched_tokens=args.max_num_batched_tokens, device=args.device,
               dtype="bfloat16" if args.device == "cuda" else None, load_format="dummy", seed=0,
               kv_cache_memory_bytes=args.pool_gib * 2**30, enforce_eager=False)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _memory_mark(device: str) -> tuple[int, int] | None:
    """(allocated, reserved) bytes before a step, its peak counter reset (CUDA; None elsewhere)."""
    if device != "cuda":
        return None
    torch.cuda.reset_peak_memory_stats()
    return torch.cuda.memory_allocated(), torch.cuda.memory_reserved()


def _memory_since(device: str, mark: tuple[int, int] | None) -> dict:
    """What a step took above its start: the allocator's peak of live tensors (its activations),
    and the growth of its reservation (cached segments, fragmentation included), in MiB."""
    if mark is None:
        return {}
    return {"peak_allocated_mib": (torch.cuda.max_memory_allocated() - mark[0]) / 2**20,
            "reserved_growth_mib": (torch.cuda.memory_reserved() - mark[1]) / 2**20,
            "reserved_mib": torch.cuda.memory_reserved() / 2**20}


class _StepLog:
    """Wraps the runner's execute: what each step scheduled, whether a captured graph ran it
    whole, how many of its decode rows a captured pass ran beside an eager one (a split mixed
    step), and marks the fixed-shape pass for the step's `_OpCount` (`counter`)."""

    def __init__(self, eng) -> None:
        self.eng, self.rows, self.counter = eng, [], None
        self._execute = eng.runner.execute
        eng.runner.execute = self._wrapped
        graphs, prefill = eng.runner.graphs, eng.runner.prefill_graphs
        self._fixed = {}                   # (object, method name) -> the method
        self.prefill_passes = 0            # passes the prefill graphs ran (runtime/prefill_graphs.py)
        for obj, name in ((graphs, "launch"), (graphs, "_execute_two_syncs"), (prefill, "launch")):
            if obj is not None:
                self._fixed[(obj, name)] = getattr(obj, name)
                setattr(obj, name, self._marking(self._fixed[(obj, name)], prefill=obj is prefill))

    def _marking(self, fn, prefill: bool = False):
        def wrapped(*a, **kw):
            self.prefill_passes += prefill
            counter = self.counter
            if counter is None:
                return fn(*a, **kw)
            counter.in_fixed = True
            try:
                return fn(*a, **kw)
            finally:
                counter.in_fixed = False
        return wrapped

    def restore(self) -> None:
        self.eng.runner.execute = self._execute
        for obj, name in self._fixed:
            delattr(obj, name)             # the class's method again

    def _wrapped(self, out, *a, **kw):
        reqs = [sr for sr in out.scheduled if sr.num_scheduled_tokens > 0]
        graphs = self.eng.runner.graphs
        prompt = sum(sr.num_scheduled_tokens for sr in reqs if not sr.spec_token_ids)    # decode rows verify drafts
        whole = bool(graphs is not None and reqs and graphs.can_run(reqs))
        split = 0 if whole or graphs is None or not reqs else len(graphs.split(reqs)[0])
        row = {"tokens": sum(sr.num_scheduled_tokens for sr in reqs), "prompt_tokens": prompt,
               "prompt_chunks": sum(1 for sr in reqs if not sr.spec_token_ids),
               "rows": len(reqs), "captured": whole, "captured_rows_beside_eager": split}
        self.rows.append(row)
        before = self.prefill_passes
        result = self._execute(out, *a, **kw)
        row["prefill_captured"] = self.prefill_passes > before     # its prompt chunks were one graph replay
        return result


def _wave(eng, args, tag: str, profile_eager: bool = False) -> list[dict]:
    """`concurrency` closed-loop slots of `requests_per_slot` requests each: every slot's first
    prompt at once, its next one added when the one before finishes (as the live ladder's
    closed-loop workers send them); step until all finish; one row per step."""
    log = _StepLog(eng)
    sent = [0] * args.concurrency

    def send(slot: int) -> None:
        i = slot + args.concurrency * sent[slot]
        eng.add_request(f"{tag}-{slot}-{sent[slot]}", [1 + (7 * i + t) % 1000 for t in range(args.prompt_tokens)],
                        SamplingParams(max_tokens=args.output_tokens, temperature=0))
        sent[slot] += 1

    for slot in range(args.concurrency):
        send(slot)
    steps = []
    try:
        while eng.has_unfinished_requests():
            _sync(args.device)
            count = _OpCount()
            mark = _memory_mark(args.device)
            t0 = time.perf_counter()
            if profile_eager and len(steps) < args.eager_steps:
                row, outputs = _profiled_step(eng, args)
                steps.append(row)
            else:
                log.counter = count
                with count:
                    outputs = eng.step()
                _sync(args.device)
                log.counter = None
                steps.append({"wall_ms": 1e3 * (time.perf_counter() - t0), "aten_ops": count.count,
                              "eager_aten_ops": count.count - count.fixed, **_memory_since(args.device, mark)})
            steps[-1].update(log.rows[-1] if log.rows else {})
            for out in outputs:
                slot = int(out.request_id.split("-")[-2])
                if out.finished and sent[slot] < args.requests_per_slot:
                    send(slot)
    finally:
        log.restore()
    return steps


def _profiled_step(eng, args) -> dict:
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
    t0 = time.perf_counter()
    with profile(activities=acts) as prof:
        outputs = eng.step()
        _sync(args.device)
    wall_ms = 1e3 * (time.perf_counter() - t0)
    events = prof.events()
    aten = collections.Counter()
    aten_us = collections.Counter()
    launches, kernels, kernel_us, busy = 0, collections.Counter(), collections.Counter(), []
    for ev in events:
        name = ev.name
        if name.startswith("aten::"):
            aten[name] += 1
            aten_us[name] += ev.self_cpu_time_total
        if name in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx"):
            launches += 1
        if getattr(ev, "device_type", None) == torch.autograd.DeviceType.CUDA:
            kernels[name] += 1
            kernel_us[name] += ev.time_range.end - ev.time_range.start
            busy.append((ev.time_range.start, ev.time_range.end))
    busy_us = 0.0
    end = None
    for a, b in sorted(busy):                    # union of the device intervals
        if end is None or a > end:
            busy_us += b - a
            end = b
        elif b > end:
            busy_us += b - end
            end = b
    return {"wall_ms_profiled": wall_ms, "aten_ops": sum(aten.values()), "launches": launches,
            "device_busy_ms": busy_us / 1e3, "kernels": sum(kernels.values()),
            "top_by_count": aten.most_common(args.top),
            "top_by_host_us": sorted(aten_us.items(), key=lambda kv: -kv[1])[:args.top],
            "top_kernels": kernels.most_common(args.top),
            "top_kernels_by_device_us": kernel_us.most_common(args.top),
            "device_ms_by_kind": {kind: us / 1e3 for kind, us in _by_kind(kernel_us).most_common()}}, outputs


KERNEL_KINDS = (   # (kind, substrings of a CUDA kernel's name), first match wins
    ("memset / memcpy", ("Memset", "Memcpy")),
    ("GEMM", ("gemm", "nvjet", "cutlass", "cublas", "sm90_xmma")),
    ("attention", ("attention", "sdpa", "fmha", "flash")),
    ("causal conv1d", ("conv",)),
    ("copy / gather / scatter", ("copy", "gather", "index", "scatter", "cat_", "CatArray")),
    ("torch elementwise / reduce", ("at::native",)),
)


def _by_kind(kernel_us: collections.Counter) -> collections.Counter:
    """Device microseconds by kind of kernel (`KERNEL_KINDS`); what no kind names is a Triton
    kernel (fla's, the engine's own) by its function name."""
    out = collections.Counter()
    for name, us in kernel_us.items():
        kind = next((k for k, keys in KERNEL_KINDS if any(key in name for key in keys)), "Triton (fla, the engine's)")
        out[kind] += us
    return out


def _chunk_histogram(steps: list[dict]) -> str:
    """How many steps held 1, 2, ... prompt chunks (0: decode only), and how many of them ran their
    chunks as one prefill graph replay, by chunks."""
    counts = collections.Counter(s.get("prompt_chunks", 0) for s in steps)
    on_graph = collections.Counter(s.get("prompt_chunks") for s in steps if s.get("prefill_captured"))
    return (", ".join(f"{n} chunk{'s' if n != 1 else ''}: {c}" for n, c in sorted(counts.items()))
            + " (on a prefill graph: " + (", ".join(f"{n} chunk{'s' if n != 1 else ''}: {c}"
                                                   for n, c in sorted(on_graph.items())) or "none") + ")")


def _eager_step_line(s: dict) -> str:
    """One eager step of a plain wave: wall time, tokens, captured decode rows, ATen ops."""
    decode = s.get("tokens", 0) - s.get("prompt_tokens", 0)
    captured = f", {s['captured_rows_beside_eager']} decode rows captured" if s.get("captured_rows_beside_eager") else ""
    captured += ", its prompt chunks on a prefill graph" if s.get("prefill_captured") else ""
    fixed = s["aten_ops"] - s["eager_aten_ops"]
    memory = (f"; peak {s['peak_allocated_mib']:.0f} MiB of activations, "
              f"reservation +{s['reserved_growth_mib']:.0f} MiB" if "peak_allocated_mib" in s else "")
    return (f"{s['wall_ms']:.1f} ms ({s.get('prompt_tokens')} prompt + {decode} decode tokens{captured}; "
            f"{s['eager_aten_ops']} ops eager, {fixed} in the fixed-shape pass{memory})")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="the tiny shapes (a check of the script itself)")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--requests-per-slot", type=int, default=1,
                    help="closed-loop requests a slot sends one after the other (the live ladder's: 2)")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--output-tokens", type=int, default=16)
    ap.add_argument("--max-num-batched-tokens", type=int, default=8192)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--pool-gib", type=int, default=16)
    ap.add_argument("--waves", type=int, default=3, help="waves before the profiled one (the first compiles)")
    ap.add_argument("--eager-steps", type=int, default=3, help="steps of the profiled wave to profile")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--whole-mixed-steps", action="store_true",
                    help="run each mixed step as one eager pass, as before mixed steps were split (to compare)")
    ap.add_argument("--equal-length-groups", action="store_true",
                    help="group only sequences of equal query length, as before ragged groups (to compare)")
    ap.add_argument("--eager-prefill", action="store_true",
                    help="run every prompt chunk eagerly, as before the prefill graphs (to compare)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    llm = _build(args)
    eng = llm.engine
    if args.whole_mixed_steps and eng.runner.graphs is not None:
        eng.runner.graphs.split = lambda reqs: ([], list(reqs))
    if args.equal_length_groups:
        from engine_under_test.model import forward_batch

        forward_batch._ragged_groups = lambda candidates, lens: []
    if args.eager_prefill and eng.runner.prefill_graphs is not None:
        eng.runner.prefill_graphs.enabled = False
    print(f"built in {time.perf_counter() - t0:.1f} s ({'tiny' if args.tiny else '2b'} shapes, {args.device})", flush=True)
    result = {"args": {k: str(v) for k, v in vars(args).items()}, "waves": []}
    for w in range(args.waves):
        steps = _wave(eng, args, f"w{w}")
        result["waves"].append(steps)
        eager = [s for s in steps if not s.get("captured")]
        print(f"wave {w}: {len(steps)} steps, {sum(s['wall_ms'] for s in steps):.1f} ms; "
              f"steps by prompt chunks: {_chunk_histogram(steps)}; eager steps: "
              + ", ".join(_eager_step_line(s) for s in eager), flush=True)
    steps = _wave(eng, args, "profiled", profile_eager=True)
    result["profiled"] = steps[:args.eager_steps]
    for i, s in enumerate(steps[:args.eager_steps]):
        print(f"\nprofiled step {i + 1}: {s.get('prompt_tokens')} prompt + {s.get('tokens', 0) - s.get('prompt_tokens', 0)} "
              f"decode tokens, captured {s.get('captured')}: wall {s['wall_ms_profiled']:.1f} ms (profiled), "
              f"{s['aten_ops']} ATen ops, {s['launches']} kernel launches, {s['kernels']} kernels, "
              f"device busy {s['device_busy_ms']:.1f} ms")
        print("  ATen ops by count:   " + ", ".join(f"{n.removeprefix('aten::')} {c}" for n, c in s["top_by_count"]))
        print("  ATen ops by host ms: " + ", ".join(f"{n.removeprefix('aten::')} {us / 1e3:.1f}" for n, us in s["top_by_host_us"]))
        print("  kernels by count:    " + ", ".join(f"{n[:40]} {c}" for n, c in s["top_kernels"]))
        if s["top_kernels_by_device_us"]:
            print("  kernels by device ms: " + ", ".join(f"{n[:40]} {us / 1e3:.2f}" for n, us in s["top_kernels_by_device_us"]))
            print("  device ms by kind:    " + ", ".join(f"{k} {ms:.1f}" for k, ms in s["device_ms_by_kind"].items()))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "mixed-steps.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
