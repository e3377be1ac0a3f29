"""Manifests: schema errors name the file and JSON path; argv templates fill from the case."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.documents.cases import find_case
from conformance.engines.manifest import ManifestError, case_values, load_manifest, render_argv
from conformance.harness.live import parse_plan_figures


@pytest.mark.parametrize("name", ["reference", "vllm", "sglang"])
def test_shipped_manifests_load(name: str) -> None:
    assert load_manifest(name).engine == name


@pytest.mark.parametrize("text, needle", [
    ("engine: x\ncommand: 'python -m x'\nhealth_url: http://h\nbase_url: http://h\n", "command: 'python -m x' is not of type 'array'"),
    ("engine: x\ncommand: [a, '{nope}']\nhealth_url: http://h\nbase_url: http://h\n", "command[1]: unknown placeholder {nope}"),
    ("engine: x\ncommand: [a]\nhealth_url: http://h\nbase_url: http://h\nstartup_regexes: {kv_cache_tokens: 'x'}\n",
     "startup_regexes.kv_cache_tokens: needs one capturing group"),
    ("engine: x\ncommand: [a]\nhealth_url: http://h\n", "(root): 'base_url' is a required property"),
])
def test_bad_manifest_names_file_and_path(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "m.yaml"
    f.write_text(text)
    with pytest.raises(ManifestError) as err:
        load_manifest(f)
    assert f"{f}: " in str(err.value) and needle in str(err.value)


def test_unset_placeholder_outside_a_guard_is_an_error() -> None:
    case = find_case("tiny-dflash-c4-k8").to_json()   # kv_cache_bytes, no gpu_memory_utilization
    values = case_values(case, 1)
    assert render_argv([{"if": "gpu_memory_utilization", "then": ["--u", "{gpu_memory_utilization}"]}], values) == []
    with pytest.raises(ManifestError, match=r"command\[0\]: placeholder \{gpu_memory_utilization\} is not set"):
        render_argv(["{gpu_memory_utilization}"], values)


def test_plan_figures_from_vllm_style_lines() -> None:
    log = ("INFO ... GPU KV cache size: 1,234,567 tokens, Maximum concurrency for 8,192 tokens per request: 150.70x\n")
    m = load_manifest("vllm")
    assert parse_plan_figures(log, m.startup_regexes) == {"kv_cache_tokens": 1234567, "max_concurrency": 150.7}
