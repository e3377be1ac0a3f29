"""`vllm serve` argv for a case: built here, parsed by vLLM 0.33's own CLI parser (oracle venv).

The live run itself needs vLLM on a GPU (nightly hardware CI: `conformance ladder --manifest vllm`).
"""

from __future__ import annotations

import copy
import json

import pytest

from conformance.adapters.vllm.config import engine_args_kwargs
from conformance.documents.cases import find_case
from conformance.engines.manifest import case_values, load_manifest, render_argv, render_env


def parse_in_oracle(engine: str, version: str, argv: list[str]) -> dict:
    """tests/adapters/_oracle_argv.py, loaded by path (the suite imports in importlib mode)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("_oracle_argv", Path(__file__).with_name("_oracle_argv.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.parse_in_oracle(engine, version, argv)


def _argv(case: dict, port: int = 8123) -> list[str]:
    m = load_manifest("vllm")
    return render_argv(m.command, case_values(case, port, {"vllm": "/opt/vllm/bin/vllm"}, m.mapping_module))


def test_fixed_acceptance_becomes_synthetic_length() -> None:
    case = find_case("tiny-dflash-c4-k8").to_json()   # acceptance fixed 3
    argv = _argv(case)
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["rejection_sample_method"] == "synthetic"
    assert spec["synthetic_acceptance_length"] == case["acceptance"]["accepted_tokens"] + 1
    assert argv[:3] == ["/opt/vllm/bin/vllm", "serve", case["resolved"]["target_dir"]]


def test_model_acceptance_leaves_the_drafter_to_decide() -> None:
    case = find_case("tiny-dflash-c4-k8").to_json()
    case["acceptance"] = {"mode": "model"}
    argv = _argv(case)
    assert "rejection_sample_method" not in json.loads(argv[argv.index("--speculative-config") + 1])


def test_no_vllm_is_a_clear_error(monkeypatch) -> None:
    from conformance.errors import ConformanceError

    monkeypatch.setenv("PATH", "/nonexistent")
    m = load_manifest("vllm")
    with pytest.raises(ConformanceError, match="--set vllm="):
        case_values(find_case("tiny-dflash-c4-k8").to_json(), 1, None, m.mapping_module)


@pytest.mark.oracle
def test_vllm_parses_the_argv_into_the_plan_adapters_knobs() -> None:
    case = find_case("tiny-dflash-c4-k8").to_json()
    got = parse_in_oracle("vllm", "0.33.0", _argv(case))
    want = engine_args_kwargs(case)
    for key in ("model", "seed", "max_num_seqs", "max_model_len", "max_num_batched_tokens", "enable_prefix_caching",
                "mamba_ssm_cache_dtype", "kv_cache_dtype", "kv_cache_memory_bytes", "load_format",
                "skip_tokenizer_init"):
        assert got[key] == want[key], key
    spec = got["speculative_config"]
    assert {k: spec[k] for k in ("method", "num_speculative_tokens", "model")} == {
        k: want["speculative_config"][k] for k in ("method", "num_speculative_tokens", "model")}
    assert spec["rejection_sample_method"] == "synthetic" and spec["synthetic_acceptance_length"] == 4.0
    assert got["port"] == 8123 and got["host"] == "127.0.0.1"
