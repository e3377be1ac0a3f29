"""Plain Hugging Face transformers generation as a throughput peer of a live case: batch = concurrency.

Contract: `peer_settings(case_spec)` reads the case's `live.transformers_peer` (concurrencies, default the
case's ladder; output_tokens, default 16: transformers' Qwen3_5 generate is slow; max_total_s, default 200).
`hf_ladder(case_id, profile, config_dir, workload, concurrencies, device, max_total_s)` returns a
`run`-mode observation (engine "transformers") with one rung per concurrency c: the model built from
`config_dir`'s config.json with seeded random weights (`torch.manual_seed(seed)`: throughput does not
depend on the values), prompts from the same `Workload` as the load generator's (c of them, one static
batch), greedy, fixed output length (min_new_tokens = max_new_tokens = workload.output_tokens). Per rung,
untimed: one `generate` of 2 new tokens (warm-up: kernel compilation and autotuning at this batch); timed:
one `generate` of the full length with a streamer that stamps each generated step as it reaches the host:
`ttft_ms` = start -> first new token, `tpot_ms` = first -> last new token / (new tokens - 1), both from
the same call (so neither can be negative), `output_tok_per_s` = c x new tokens / its wall time.
A failure becomes a rung with status error and the exception's first line; once the rungs took
longer than `max_total_s` the next rung is an error saying so (the peer is slow on some shapes).
The Gated-DeltaNet kernels transformers picked are named in `provenance.functions`.
`ratios(engine_obs, peer_obs)`: per concurrency both measured, the engine's output tok/s over the peer's
and the peer's median TPOT over the engine's (the two output lengths differ: tok/s is per wall second).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from conformance.documents import observation
from conformance.harness.hardware import describe
from conformance.loadgen import Workload

GDN_KERNELS = ("causal_conv1d_fn", "causal_conv1d_update", "chunk_gated_delta_rule", "recurrent_gated_delta_rule")


def _kernels(model: Any) -> list[str]:
    """`name = module.function` of the GDN kernels the first Gated-DeltaNet layer calls (instance
    attributes in older transformers, module functions in newer)."""
    import sys

    layer = next((m for m in model.modules() if type(m).__name__.endswith("GatedDeltaNet")), None)
    if layer is None:
        return []
    module = sys.modules.get(type(layer).__module__)
    out = []
    for name in GDN_KERNELS:
        fn = getattr(layer, name, None) or getattr(module, name, None) or getattr(module, f"torch_{name}", None)
        if callable(fn):
            fn = _implementation(fn)
            out.append(f"{name} = {getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}")
    return out


def _implementation(fn: Any) -> Any:
    """The function a transformers kernel wrapper (`use_kernel_func_from_hub_with_fallback`) calls: the
    kernel package's when importable, else the PyTorch reference; `fn` itself when it is no such wrapper."""
    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
    names = code.co_freevars if code else ()
    if "implementation" in names and len(names) == len(cells):
        inner = cells[names.index("implementation")].cell_contents
        if callable(inner):
            return inner
    return fn


def _packages() -> dict[str, str | None]:
    """Versions of the kernel packages transformers' Qwen3_5 uses when importable (None: absent)."""
    from importlib import metadata

    out: dict[str, str | None] = {}
    for dist in ("fla-core", "flash-linear-attention", "causal-conv1d"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


class _StepClock:
    """A transformers streamer (`put` / `end`): the host time at which each generated step arrives.
    `generate` calls `put` once with the prompt, then once per new token of the batch."""

    def __init__(self, device: str):
        self.device, self.stamps_s, self._seen_prompt = device, [], False

    def put(self, value: Any) -> None:
        if not self._seen_prompt:
            self._seen_prompt = True
            return
        _sync(self.device)
        self.stamps_s.append(time.perf_counter())

    def end(self) -> None:
        pass


def _generate(model: Any, prompts: Any, num_new_tokens: int, pad_token_id: int, device: str,
              clock: _StepClock | None = None) -> tuple[Any, float, float]:
    """(output ids, start time, wall seconds)."""
    import torch

    with torch.no_grad():
        _sync(device)
        t = time.perf_counter()
        out = model.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=False,
                             max_new_tokens=num_new_tokens, min_new_tokens=num_new_tokens, pad_token_id=pad_token_id,
                             streamer=clock)
        _sync(device)
        return out, t, time.perf_counter() - t


def _rung(model: Any, prompts: Any, n: int, pad: int, device: str) -> tuple[dict[str, Any], dict[str, Any]]:
    c = prompts.shape[0]
    _generate(model, prompts, 2, pad, device)
    clock = _StepClock(device)
    out, t0, wall_s = _generate(model, prompts, n, pad, device, clock)
    new = (out.shape[1] - prompts.shape[1]) * c
    stamps = clock.stamps_s
    ttft_s = stamps[0] - t0 if stamps else wall_s
    tpot_ms = (stamps[-1] - stamps[0]) / (len(stamps) - 1) * 1e3 if len(stamps) > 1 else None
    rung = {"concurrency": c, "status": "ok", "output_tok_per_s": new / wall_s, "num_requests": c,
            "num_output_tokens": new, "message": None,
            "ttft_ms": {"median": ttft_s * 1e3, "num_samples": 1},
            "tpot_ms": None if tpot_ms is None else {"median": tpot_ms, "num_samples": 1},
            "mean_acceptance_length": None}
    if new != c * n:
        rung.update(status="error", message=f"generate returned {new} new tokens where {c * n} were asked")
    return rung, {"concurrency": c, "wall_s": wall_s, "ttft_s": ttft_s}


@dataclass(frozen=True)
class PeerSettings:
    concurrencies: tuple[int, ...]
    output_tokens: int = 16
    max_total_s: float = 200.0


def peer_settings(case_spec: Mapping[str, Any]) -> PeerSettings:
    live = case_spec.get("live") or {}
    peer = live.get("transformers_peer") or {}
    return PeerSettings(tuple(int(c) for c in peer.get("concurrencies") or live["concurrencies"]),
                        int(peer.get("output_tokens", 16)), float(peer.get("max_total_s", 200.0)))


def _model(config_dir: str, dtype: Any, device: str, seed: int) -> Any:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(config_dir)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=dtype).to(device).eval()


def hf_ladder(case_id: str, profile: str, config_dir: str, workload: Workload, concurrencies: tuple[int, ...],
              device: str = "cuda", max_total_s: float = 600.0,
              on_rung: Callable[[dict[str, Any]], None] = lambda r: None, seed: int = 0) -> dict[str, Any]:
    import torch
    import transformers

    obs = observation.new(case_id, "transformers", transformers.__version__, "run", profile)
    obs["device"]["hardware"] = describe(device)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    t0 = time.perf_counter()
    model = _model(config_dir, dtype, device, seed)
    load_s = time.perf_counter() - t0
    obs["provenance"]["functions"] = ["transformers.AutoModelForCausalLM.from_config",
                                      "GenerationMixin.generate"] + _kernels(model)
    obs["provenance"]["glue"] = [{"name": "conformance.harness.transformers_peer", "description": (
        "seeded random weights; batch = concurrency; per rung an untimed 2-token warm-up, then one timed full-length generate with a "
        "streamer stamping each new token on the host: ttft = start -> first token, tpot = first -> last token / "
        "(new tokens - 1), tokens/s = batch x new tokens / wall time")}]
    eos = getattr(model.config, "eos_token_id", None)
    pad = int((eos[0] if isinstance(eos, (list, tuple)) and eos else eos) or 0)
    rungs, timing = [], []
    start = time.perf_counter()
    for c in concurrencies:
        spent_s = time.perf_counter() - start
        if spent_s > max_total_s:
            rungs.append({"concurrency": c, "status": "error", "output_tok_per_s": None,
                          "message": f"not run: the peer's rungs took {spent_s:.0f} s, "
                                     f"over max_total_s={max_total_s:g}"})
            on_rung(rungs[-1])
            break
        prompts = torch.tensor([workload.prompt_token_ids(f"hf-c{c}", i) for i in range(c)], device=device)
        try:
            rung, t = _rung(model, prompts, workload.output_tokens, pad, device)
            rungs.append(rung)
            timing.append(t)
        except Exception as exc:  # noqa: BLE001 - a peer's failure is data for the report
            rungs.append({"concurrency": c, "status": "error", "output_tok_per_s": None,
                          "message": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"})
        on_rung(rungs[-1])
        if rungs[-1]["status"] == "error":
            break
    obs["throughput"] = {"rungs": rungs, "workload": {"prompt_tokens": workload.prompt_tokens,
                                                      "output_tokens": workload.output_tokens, "seed": workload.seed}}
    obs["timing"] = {"load_s": load_s, "rungs": timing, "kernel_packages": _packages(),
                     "wall_s": time.perf_counter() - t0}
    if any(r["status"] == "error" for r in rungs):
        obs["status"], obs["message"] = "error", next(r["message"] for r in rungs if r["status"] == "error")
    return observation.validate(obs, "transformers peer")


def _by_c(obs: dict[str, Any], figure: str) -> dict[int, float]:
    out = {}
    for r in (obs.get("throughput") or {}).get("rungs") or []:
        value = r.get(figure)
        value = value.get("median") if isinstance(value, dict) else value
        if r.get("status") == "ok" and value:
            out[r["concurrency"]] = float(value)
    return out


def ratios(engine_obs: dict[str, Any], peer_obs: dict[str, Any]) -> dict[str, dict[str, float]]:
    """{figure: {concurrency: ratio}} over the rungs both measured ok (see the module's contract)."""
    tok_e, tok_p = _by_c(engine_obs, "output_tok_per_s"), _by_c(peer_obs, "output_tok_per_s")
    tpot_e, tpot_p = _by_c(engine_obs, "tpot_ms"), _by_c(peer_obs, "tpot_ms")
    return {"output_tok_per_s_engine_over_transformers": {str(c): tok_e[c] / tok_p[c] for c in sorted(set(tok_e) & set(tok_p))},
            "tpot_transformers_over_engine": {str(c): tpot_p[c] / tpot_e[c] for c in sorted(set(tpot_e) & set(tpot_p))}}
