"""`vllm serve` for a case, live (the `live:` manifest of conformance/engines/engine_files/vllm.yaml): the mapping module.

Contract: `placeholders(case, values)` returns the vLLM-only values the manifest uses, built from
the same builders the vLLM plan adapter uses (`conformance.engines.speculative_config`,
`vllm_config.KV_CACHE_DTYPES`), so a live run and a plan of one case get the same knobs. It
imports no vLLM: the argv is built in the framework's environment and run where vLLM and a GPU
are. Acceptance: synthetic maps to `rejection_sample_method: synthetic` with vLLM 0.33's
`synthetic_acceptance_length` / `synthetic_acceptance_rates`; fixed n maps to a synthetic length
n + 1, which vLLM's minimum-variance schedule turns into exactly n accepted drafts per step;
model leaves the real drafter to decide. Shape dirs without weights load with
`--load-format dummy`; without tokenizer files, `--skip-tokenizer-init` (requests then ask
`return_token_ids`, see the manifest).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from conformance.adapters.vllm.config import KV_CACHE_DTYPES
from conformance.engines.speculative_config import speculative_config
from conformance.errors import ConformanceError

EXTRA_PLACEHOLDERS = {
    "vllm": "the `vllm` executable (PATH, else --set vllm=PATH)",
    "vllm_speculative_config": "--speculative-config JSON from conformance.engines.speculative_config (served: fixed -> synthetic)",
    "vllm_kv_cache_dtype": "vllm_config.KV_CACHE_DTYPES[cache.kv_cache_dtype]",
    "load_format": "auto with *.safetensors in the target dir, else dummy",
    "skip_tokenizer_init": "set when the target dir has no tokenizer files",
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")


def placeholders(case: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    target = Path(case["resolved"]["target_dir"])
    exe = values.get("vllm") or shutil.which("vllm")
    if not exe:
        raise ConformanceError("vllm live: no `vllm` executable on PATH; pass --set vllm=/path/to/venv/bin/vllm")
    return {
        "vllm": exe,
        "vllm_speculative_config": json.dumps(speculative_config(case, served=True), sort_keys=True),
        "vllm_kv_cache_dtype": KV_CACHE_DTYPES[case["cache"].get("kv_cache_dtype", "bfloat16")],
        "load_format": "auto" if any(target.glob("*.safetensors")) else "dummy",
        "skip_tokenizer_init": not any((target / f).exists() for f in TOKENIZER_FILES) or None,
    }
