"""`python -m sglang.launch_server` for a case, live (the `live:` manifest of conformance/engines/engine_files/sglang.yaml).

Contract: `placeholders(case, values)` returns the SGLang-only values the manifest uses, from the
tables of the SGLang plan adapter (`sglang_knobs.ALGORITHMS`, `KV_CACHE_DTYPES`), or raises
`ValueError` for a case SGLang 0.5.23 has no knob for (the process adapter reports it refused).
No SGLang import: the argv is built in the framework's environment.

- k drafts -> --speculative-num-draft-tokens k + 1 (the DFlash block: anchor + k drafts).
- Simulated acceptance: SGLang 0.5.23 reads `SGLANG_SIMULATE_ACC_LEN` (srt/environ.py; a mean
  acceptance length in [1, k + 1], bonus token included, "match-expected" method by default):
  synthetic mean -> that value; fixed n -> n + 1; per-position rates -> refused (no such knob);
  model -> unset (the real drafter decides).
- Memory: --mem-fraction-static from gpu_memory_utilization. SGLang has no byte bound for the
  pool: a kv_cache_bytes case is refused unless `--set mem_fraction_static=F` says what to use.
- --enable-metrics for /metrics; SGLang exposes the acceptance length as a gauge only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conformance.adapters.sglang.knobs import ALGORITHMS, EAGLE_STYLE, KV_CACHE_DTYPES

EXTRA_PLACEHOLDERS = {
    "sglang_algorithm": "sglang_knobs.ALGORITHMS[speculative.method]",
    "sglang_num_steps": "EAGLE-style algorithms: k (else unset)",
    "sglang_kv_cache_dtype": "sglang_knobs.KV_CACHE_DTYPES[cache.kv_cache_dtype]",
    "mem_fraction_static": "gpu_memory_utilization, or --set mem_fraction_static=F",
    "disable_radix_cache": "set when prefix caching is off",
    "load_format": "auto with *.safetensors in the target dir, else dummy",
    "sglang_python": "the Python that has sglang (--set sglang_python=PATH; default: the framework's)",
}


def placeholders(case: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    method = case["speculative"]["method"]
    if method not in ALGORITHMS:
        raise ValueError(f"SGLang 0.5.23 has no speculative algorithm for case method {method!r}")
    algo = ALGORITHMS[method]
    kv = case["cache"].get("kv_cache_dtype", "bfloat16")
    if kv not in KV_CACHE_DTYPES:
        raise ValueError(f"cache.kv_cache_dtype {kv!r}: SGLang 0.5.23's --kv-cache-dtype has no such choice")
    acc = case["acceptance"]
    if acc["mode"] == "synthetic" and "acceptance_rates" in acc:
        raise ValueError("acceptance.acceptance_rates: SGLang 0.5.23 simulates a mean acceptance length only "
                         "(SGLANG_SIMULATE_ACC_LEN); give acceptance.mean_acceptance_length")
    fraction = values.get("mem_fraction_static") or case["memory"].get("gpu_memory_utilization")
    if fraction is None:
        raise ValueError("memory.kv_cache_bytes: SGLang 0.5.23 has no byte bound for its pools "
                         "(--mem-fraction-static is a fraction of the device); give memory.gpu_memory_utilization "
                         "or --set mem_fraction_static=F")
    target = Path(case["resolved"]["target_dir"])
    k = int(case["speculative"]["num_speculative_tokens"])
    return {
        "sglang_algorithm": algo,
        "sglang_num_steps": k if algo in EAGLE_STYLE else None,
        "sglang_kv_cache_dtype": KV_CACHE_DTYPES[kv],
        "mem_fraction_static": fraction,
        "disable_radix_cache": not case["cache"]["prefix_caching"] or None,
        "load_format": "auto" if any(target.glob("*.safetensors")) else "dummy",
        "sglang_python": values.get("sglang_python") or values["python"],
    }
