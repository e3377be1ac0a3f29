"""The offline API, vLLM's shape: `LLM(model=..., speculative_config=..., ...).generate(prompts, params)`.

    llm = LLM(model="dir", speculative_config={"method": "dflash", "model": "draft_dir",
                                               "num_speculative_tokens": 8},
              max_num_seqs=8, max_model_len=1024, kv_cache_memory_bytes=2**28, device="cpu")
    outs = llm.generate([[1, 2, 3], {"prompt_token_ids": [4, 5]}], SamplingParams(max_tokens=16, temperature=0))

Prompts are token-id lists or {"prompt_token_ids": [...]} (no tokenizer). Outputs come back in
prompt order. Acceptance: the real drafter by default; vLLM's synthetic rejection sampler through
speculative_config {"rejection_sample_method": "synthetic", "synthetic_acceptance_length": x}
or {"synthetic_acceptance_rates": [...]}; or `acceptance={"mode": "fixed", "accepted_tokens": n}`
(the case schema's acceptance models).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine_under_test.config import EngineConfig, SpeculativeConfig
from engine_under_test.engine import LLMEngine, RequestOutput
from engine_under_test.sampling_params import SamplingParams

__all__ = ["LLM", "SamplingParams", "RequestOutput"]


def _acceptance_from_spec(spec: dict[str, Any], acceptance: dict | None) -> dict | None:
    method = spec.get("rejection_sample_method", "standard")
    if method == "standard":
        return acceptance
    if method != "synthetic":
        raise ValueError(f"speculative_config.rejection_sample_method: {method!r} is not supported (standard, synthetic)")
    if acceptance is not None:
        raise ValueError("acceptance: give it either here or as speculative_config's synthetic rates, not both")
    if ("synthetic_acceptance_rates" in spec) == ("synthetic_acceptance_length" in spec):
        raise ValueError("speculative_config: rejection_sample_method 'synthetic' requires exactly one of "
                         "synthetic_acceptance_rates or synthetic_acceptance_length")
    if "synthetic_acceptance_rates" in spec:
        return {"mode": "synthetic", "acceptance_rates": list(spec["synthetic_acceptance_rates"])}
    return {"mode": "synthetic", "mean_acceptance_length": float(spec["synthetic_acceptance_length"])}


def _device_memory_bytes(device: str) -> int | None:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.mem_get_info(torch.device(device))[1]
    return None


class LLM:
    def __init__(self, model: str | Path, speculative_config: dict[str, Any] | None = None, *,
                 max_num_seqs: int = 8, max_model_len: int = 2048, max_num_batched_tokens: int = 2048,
                 kv_cache_memory_bytes: int | None = None, gpu_memory_utilization: float | None = None,
                 device: str = "cpu", dtype: str | None = None, load_format: str = "safetensors",
                 seed: int = 0, acceptance: dict | None = None, kv_cache_dtype: str | None = None,
                 mamba_ssm_cache_dtype: str = "float32", enforce_eager: bool | None = None,
                 async_scheduling: bool = False):
        spec = None
        if speculative_config is not None:
            unknown = set(speculative_config) - {"method", "model", "num_speculative_tokens", "rejection_sample_method",
                                                 "synthetic_acceptance_rates", "synthetic_acceptance_length"}
            if unknown:
                raise ValueError(f"speculative_config: unknown keys {sorted(unknown)}")
            spec = SpeculativeConfig(method=speculative_config.get("method", "dflash"),
                                     num_speculative_tokens=speculative_config.get("num_speculative_tokens", 0),
                                     model=Path(speculative_config["model"]) if speculative_config.get("model") else None)
            acceptance = _acceptance_from_spec(speculative_config, acceptance)
        if kv_cache_memory_bytes is None and gpu_memory_utilization is None:
            gpu_memory_utilization = 0.9 if device.startswith("cuda") else None
            if gpu_memory_utilization is None:
                kv_cache_memory_bytes = 256 * 2**20
        default_dtype = dtype or ("float32" if device == "cpu" else None)
        cfg = EngineConfig(
            model=Path(model), max_num_seqs=max_num_seqs, max_model_len=max_model_len,
            max_num_batched_tokens=max_num_batched_tokens, speculative_config=spec,
            kv_cache_memory_bytes=kv_cache_memory_bytes, gpu_memory_utilization=gpu_memory_utilization,
            device_memory_bytes=_device_memory_bytes(device) if gpu_memory_utilization is not None else None,
            kv_cache_dtype=kv_cache_dtype or (default_dtype or "bfloat16"),
            mamba_cache_dtype=default_dtype or "auto", mamba_ssm_cache_dtype=mamba_ssm_cache_dtype, device=device,
            enforce_eager=enforce_eager, async_scheduling=async_scheduling)
        self.engine = LLMEngine(cfg, acceptance=acceptance, seed=seed, load_format=load_format, dtype=default_dtype)

    def generate(self, prompts: list, sampling_params: SamplingParams | list[SamplingParams] | None = None
                 ) -> list[RequestOutput]:
        params = sampling_params or SamplingParams()
        if isinstance(params, SamplingParams):
            params = [params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"sampling_params: {len(params)} for {len(prompts)} prompts")
        base = self.engine._num_added
        ids = []
        for i, (prompt, p) in enumerate(zip(prompts, params)):
            tokens = prompt["prompt_token_ids"] if isinstance(prompt, dict) else prompt
            if not isinstance(tokens, list):
                raise ValueError(f"prompts[{i}]: expected a token-id list or {{'prompt_token_ids': [...]}}")
            rid = str(base + i)
            self.engine.add_request(rid, tokens, p)
            ids.append(rid)
        final: dict[str, RequestOutput] = {}
        while self.engine.has_unfinished_requests():
            for out in self.engine.step():
                if out.finished:
                    final[out.request_id] = out
        return [final[rid] for rid in ids]
