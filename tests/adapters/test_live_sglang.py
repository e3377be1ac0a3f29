"""`python -m sglang.launch_server` argv + env for a case: built here, parsed by SGLang 0.5.23's own
parser (oracle venv). The live run needs SGLang on a GPU (nightly: `conformance ladder --manifest sglang`)."""

from __future__ import annotations

import pytest

from conformance.documents.cases import find_case
from conformance.engines.manifest import case_values, load_manifest, render_argv, render_env
from conformance.harness.live import run_live
from conformance.loadgen import LoadgenSettings


def parse_in_oracle(engine: str, version: str, argv: list[str]) -> dict:
    """tests/adapters/_oracle_argv.py, loaded by path (the suite imports in importlib mode)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("_oracle_argv", Path(__file__).with_name("_oracle_argv.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.parse_in_oracle(engine, version, argv)


def _case(**changes) -> dict:
    case = find_case("tiny-dflash-c4-k8").to_json()
    case.update(changes)
    return case


def _render(case: dict, overrides: dict | None = None) -> tuple[list[str], dict]:
    m = load_manifest("sglang")
    v = case_values(case, 8124, overrides, m.mapping_module)
    return render_argv(m.command, v), render_env(m.env, v)


def test_simulated_acceptance_env_and_draft_tokens() -> None:
    case = _case(memory={"gpu_memory_utilization": 0.8},
                 acceptance={"mode": "synthetic", "mean_acceptance_length": 4.5})
    argv, env = _render(case)
    assert env == {"SGLANG_SIMULATE_ACC_LEN": "4.5"}
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "9"    # k = 8 drafts + the anchor
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.8"
    _, env = _render(_case(memory={"gpu_memory_utilization": 0.8}, acceptance={"mode": "model"}))
    assert env == {}


@pytest.mark.parametrize("changes, needle", [
    ({}, "no byte bound"),                                                     # kv_cache_bytes
    ({"memory": {"gpu_memory_utilization": 0.8},
      "acceptance": {"mode": "synthetic", "acceptance_rates": [0.9] * 8}}, "mean acceptance length only"),
])
def test_cases_sglang_cannot_express_are_refused(tmp_path, changes, needle) -> None:
    obs = run_live(load_manifest("sglang"), _case(**changes), LoadgenSettings(concurrencies=(1,)), log_dir=tmp_path)
    assert obs["status"] == "refused" and needle in obs["message"]


@pytest.mark.oracle
def test_sglang_parses_the_argv_into_the_plan_adapters_knobs() -> None:
    case = _case()
    argv, _ = _render(case, {"mem_fraction_static": 0.7})
    got = parse_in_oracle("sglang", "0.5.23", argv)
    assert got["model_path"] == case["resolved"]["target_dir"]
    assert got["speculative_algorithm"] == "DFLASH" and got["speculative_num_draft_tokens"] == 9
    assert got["speculative_draft_model_path"] == case["resolved"]["draft_dir"]
    assert got["max_running_requests"] == 4 and got["context_length"] == 2048 and got["chunked_prefill_size"] == 512
    assert got["mem_fraction_static"] == 0.7 and got["disable_radix_cache"] is True
    assert got["mamba_ssm_dtype"] == "float32" and got["kv_cache_dtype"] == "bfloat16"
    assert got["enable_metrics"] is True and got["skip_tokenizer_init"] is True and got["port"] == 8124
