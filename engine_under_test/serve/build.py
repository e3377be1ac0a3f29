"""The serve side of the engine: build `LLMEngine` from flags, read its stats, map request bodies.

`build_engine(args)` -> the `LLMEngine` that `engine_under_test.llm.LLM` builds from the same
knobs (one mapping from flags to config); raises ValueError (the engine's refusal) for a
configuration it cannot run. Weights: `*.safetensors` in the model dir (and in the draft dir)
load as they are; a dir without any gets seeded random weights from `--seed` (load_format
dummy). A target with weights and a drafter without (or the reverse) is refused: the two
must agree for greedy parity to mean anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine_under_test.engine import EngineStats, LLMEngine
from engine_under_test.llm import LLM
from engine_under_test.sampling_params import SamplingParams
from engine_under_test.serve.args import ServeArgs
from engine_under_test.serve.metrics import ACCEPTED_PER_POS_KEY_PREFIX, COUNTER_KEY_PREFIX


def _has_weights(d: Path) -> bool:
    return any(d.glob("*.safetensors"))


def load_format(args: ServeArgs) -> str:
    spec = args.speculative_config or {}
    dirs = [args.model] + ([Path(spec["model"])] if spec.get("model") else [])
    have = [_has_weights(Path(d)) for d in dirs]
    if all(have):
        return "safetensors"
    if not any(have):
        return "dummy"
    with_w = [str(d) for d, h in zip(dirs, have) if h]
    without = [str(d) for d, h in zip(dirs, have) if not h]
    raise ValueError(f"weights: {', '.join(with_w)} has *.safetensors but {', '.join(without)} has none "
                     "(give both checkpoints, or neither for seeded random weights)")


def build_engine(args: ServeArgs) -> LLMEngine:
    if args.enable_prefix_caching:
        raise ValueError("--enable-prefix-caching: the reference runtime does not run align mode (plan mode only)")
    llm = LLM(args.model, args.speculative_config, max_num_seqs=args.max_num_seqs, max_model_len=args.max_model_len,
              max_num_batched_tokens=args.max_num_batched_tokens, kv_cache_memory_bytes=args.kv_cache_memory_bytes,
              gpu_memory_utilization=args.gpu_memory_utilization, device=args.device,
              dtype=None if args.dtype == "auto" else args.dtype, load_format=load_format(args), seed=args.seed,
              mamba_ssm_cache_dtype=args.mamba_ssm_cache_dtype, async_scheduling=args.async_scheduling)
    return llm.engine


def engine_stats(engine: LLMEngine) -> dict[str, float]:
    """Snapshot keys for `metrics.render` (engine thread only); accepted tokens per draft
    position i under `accepted_per_pos:i`, one key per position 0 .. k - 1; the counters in
    `extra["counters"]` ({Prometheus name ending in _total: value}) under `counter:NAME`."""
    s: EngineStats = engine.stats()
    snap: dict[str, float] = {"num_steps": s.num_steps, "num_scheduled_tokens": s.num_scheduled_tokens,
                              "num_draft_tokens": s.num_draft_tokens, "num_accepted_tokens": s.num_accepted_tokens,
                              "pool_usage": s.pool_usage,
                              # vLLM's gauges: scheduled requests only, and the ones still queued
                              "num_requests_running": s.num_running, "num_requests_waiting": s.num_waiting}
    for i, n in enumerate(s.num_accepted_tokens_per_pos):
        snap[f"{ACCEPTED_PER_POS_KEY_PREFIX}{i}"] = n
    if "num_drafts" in s.extra:
        snap["num_drafts"] = s.extra["num_drafts"]
    for name, value in s.extra.get("counters", {}).items():
        snap[f"{COUNTER_KEY_PREFIX}{name}"] = value
    return snap
