"""Command-line flags of `python -m engine_under_test.serve`, with `vllm serve`'s names.

Contract: `parse(argv)` returns `ServeArgs` or exits 2 with argparse's message naming the flag.
`--speculative-config` takes vLLM's JSON keys, as `engine_under_test.llm.LLM` takes them:
method, num_speculative_tokens, model (draft dir), rejection_sample_method ("standard" |
"synthetic"), synthetic_acceptance_length or synthetic_acceptance_rates (vLLM 0.33's names).
The engine itself is built by `LLM` (`build.build_engine`): one mapping from flags to config.
`--async-scheduling / --no-async-scheduling` (vLLM's spelling): schedule step n + 1 before step
n's output and, where the step is a captured greedy decode step, launch it behind n on the
device (engine.py, "Pipelined"); default on with `--device cuda` (vLLM's GPU default), off on
cpu (no captured graphs there: the flag would only change the scheduler's bookkeeping).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


SPEC_KEYS = frozenset({"method", "num_speculative_tokens", "model", "rejection_sample_method",
                       "synthetic_acceptance_length", "synthetic_acceptance_rates"})
DTYPES = ("auto", "bfloat16", "float16", "float32")


@dataclass(frozen=True)
class ServeArgs:
    model: Path
    served_model_name: str
    speculative_config: dict[str, Any] | None
    max_num_seqs: int
    max_model_len: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float | None
    kv_cache_memory_bytes: int | None
    enable_prefix_caching: bool
    async_scheduling: bool
    mamba_ssm_cache_dtype: str
    device: str
    dtype: str
    seed: int
    host: str
    port: int


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m engine_under_test.serve",
                                description="OpenAI-compatible server for the reference engine")
    p.add_argument("--model", required=True, type=Path,
                   help="target dir: config.json (+ *.safetensors; seeded random weights when none)")
    p.add_argument("--served-model-name", default=None, help="model id in /v1/models (default: the dir name)")
    p.add_argument("--speculative-config", default=None, help="JSON, vLLM's keys (see module doc)")
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-model-len", type=int, default=None, help="default: the model's max_position_embeddings")
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    mem = p.add_mutually_exclusive_group()
    mem.add_argument("--gpu-memory-utilization", type=float, default=None,
                     help="fraction of the CUDA device's memory for everything (cuda default 0.9; cpu default: "
                          "--kv-cache-memory-bytes 256 MiB)")
    mem.add_argument("--kv-cache-memory-bytes", type=int, default=None, help="bytes of the unified pool")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction, default=None,
                   help="plan and launch step n + 1 before reading step n (default: on for cuda, off for cpu)")
    p.add_argument("--mamba-ssm-cache-dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--dtype", default="auto", choices=DTYPES,
                   help="weights and activations (auto: float32 on cpu, config.json's on cuda, as LLM does)")
    p.add_argument("--seed", type=int, default=0, help="random weights when the dir has none; synthetic acceptance")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0: pick a free port (printed at startup)")
    return p


def speculative_from_json(text: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--speculative-config: not valid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(doc, dict):
        raise ValueError("--speculative-config: must be a JSON object")
    unknown = sorted(set(doc) - SPEC_KEYS)
    if unknown:
        raise ValueError(f"--speculative-config: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(SPEC_KEYS))})")
    for key in ("method", "num_speculative_tokens"):
        if key not in doc:
            raise ValueError(f"--speculative-config.{key}: required")
    return doc


def _max_position_embeddings(model: Path) -> int:
    try:
        cfg = json.loads((model / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"--model: cannot read {model / 'config.json'}: {exc}") from None
    text = cfg.get("text_config", cfg)
    return int(text.get("max_position_embeddings", 4096))


def parse(argv: list[str] | None = None) -> ServeArgs:
    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        if not (ns.model / "config.json").is_file():
            raise ValueError(f"--model: {ns.model} has no config.json")
        spec = speculative_from_json(ns.speculative_config) if ns.speculative_config else None
        util = ns.gpu_memory_utilization
        if util is not None and ns.device != "cuda":
            raise ValueError("--gpu-memory-utilization: needs --device cuda (on cpu give --kv-cache-memory-bytes)")
    except ValueError as exc:
        parser.error(str(exc))
    return ServeArgs(
        model=ns.model.resolve(), served_model_name=ns.served_model_name or ns.model.resolve().name,
        speculative_config=spec, max_num_seqs=ns.max_num_seqs,
        max_model_len=ns.max_model_len or _max_position_embeddings(ns.model),
        max_num_batched_tokens=ns.max_num_batched_tokens, gpu_memory_utilization=util,
        kv_cache_memory_bytes=ns.kv_cache_memory_bytes,
        enable_prefix_caching=ns.enable_prefix_caching,
        async_scheduling=ns.async_scheduling if ns.async_scheduling is not None else ns.device == "cuda",
        mamba_ssm_cache_dtype=ns.mamba_ssm_cache_dtype,
        device=ns.device, dtype=ns.dtype, seed=ns.seed, host=ns.host, port=ns.port)
