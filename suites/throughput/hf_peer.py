"""Plain Hugging Face transformers generation as a throughput peer: batch = concurrency.

Contract: `hf_ladder(model_dir, workload, concurrencies, device)` returns a `run`-mode observation
(engine "transformers") with one rung per concurrency: `output_tok_per_s` = batch x new tokens /
wall time of one `generate` call (greedy, min_new_tokens = max_new_tokens: fixed output length),
prompts from the same `Workload` as the load generator's. A failure becomes a rung with status
error and the exception's last line.
"""

from __future__ import annotations

import time
from typing import Any

from conformance import observation
from conformance.adapters.hardware import describe
from conformance.loadgen import Workload


def hf_ladder(case_id: str, profile: str, model_dir: str, workload: Workload, concurrencies: tuple[int, ...],
              device: str = "cuda") -> dict[str, Any]:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    obs = observation.new(case_id, "transformers", transformers.__version__, "run", profile)
    obs["device"]["hardware"] = describe(device)
    obs["provenance"]["functions"] = ["transformers.AutoModelForCausalLM.from_pretrained", "GenerationMixin.generate"]
    obs["provenance"]["glue"] = [{"name": "suites.throughput.hf_peer", "description": "batch = concurrency; "
                                  "tokens/s = batch x new tokens / wall time of one generate call"}]
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to(device).eval()
    rungs, timing = [], []
    for c in concurrencies:
        prompts = torch.tensor([workload.prompt_token_ids(f"hf-c{c}", i) for i in range(c)], device=device)
        try:
            with torch.no_grad():
                torch.cuda.synchronize()
                t = time.perf_counter()
                out = model.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=False,
                                     max_new_tokens=workload.output_tokens, min_new_tokens=workload.output_tokens)
                torch.cuda.synchronize()
                wall = time.perf_counter() - t
            new = (out.shape[1] - prompts.shape[1]) * c
            rungs.append({"concurrency": c, "status": "ok", "output_tok_per_s": new / wall, "num_requests": c,
                          "num_output_tokens": new, "message": None})
            timing.append({"concurrency": c, "wall_s": wall})
        except Exception as exc:  # noqa: BLE001 - a peer's failure is data for the report
            rungs.append({"concurrency": c, "status": "error", "output_tok_per_s": None,
                          "message": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"})
            break
    obs["throughput"] = {"rungs": rungs, "workload": {"prompt_tokens": workload.prompt_tokens,
                                                      "output_tokens": workload.output_tokens, "seed": workload.seed}}
    obs["timing"] = {"rungs": timing}
    if any(r["status"] == "error" for r in rungs):
        obs["status"], obs["message"] = "error", next(r["message"] for r in rungs if r["status"] == "error")
    return observation.validate(obs, "hf_peer")
