"""benchmarks/mixed_step_profile.py runs on a CPU with tiny shapes and writes what the card's run
will read: each step's scheduled prompt chunks, whether a prefill graph ran its one chunk, and its
op counts, for the engine's way and with the prefill graphs off (`--eager-prefill`), under
closed-loop slots (`--requests-per-slot`).

Two slots of 64-token prompts over a 96-token budget: the first step takes the first prompt and
32 tokens of the second (two chunks: the budget holds no two-prompt key, so they run on the prefill
graphs as two passes one after the other, or eagerly with `--eager-prefill`), the next finishes the
second (one chunk); each slot's second prompt arrives when its first finishes.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from conformance.paths import REPO_ROOT

ARGS = ["--tiny", "--device", "cpu", "--waves", "1", "--eager-steps", "1", "--concurrency", "2",
        "--prompt-tokens", "64", "--output-tokens", "4", "--requests-per-slot", "2",
        "--max-num-batched-tokens", "96", "--pool-gib", "1", "--k", "4"]


def _script():
    spec = importlib.util.spec_from_file_location("mixed_step_profile",
                                                  REPO_ROOT / "benchmarks" / "mixed_step_profile.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("eager_prefill", [False, True], ids=["engine", "eager-prefill"])
def test_the_profile_script_on_cpu_tiny(tmp_path, capsys, eager_prefill):
    _script().main(ARGS + ["--out", str(tmp_path)] + (["--eager-prefill"] if eager_prefill else []))
    result = json.loads((tmp_path / "mixed-steps.json").read_text())
    for wave in result["waves"] + [result["profiled"]]:
        assert all({"prompt_chunks", "prefill_captured", "rows", "tokens"} <= set(s) for s in wave)
    steps = result["waves"][0]
    # 4 prompts of 64 tokens in all (2 slots x 2), 4 output tokens each
    assert sum(s["prompt_tokens"] for s in steps) == 4 * 64
    assert steps[0]["prompt_chunks"] == 2 and steps[0]["prefill_captured"] != eager_prefill
    on_graph = [s for s in steps if s["prefill_captured"]]
    if eager_prefill:
        assert not on_graph
    else:
        assert all(s["prefill_captured"] for s in steps if s["prompt_chunks"])      # every prompt chunk
        assert {s["prompt_chunks"] for s in on_graph} == {1, 2} and all(s["eager_aten_ops"] < 50 for s in on_graph)
    assert "steps by prompt chunks:" in capsys.readouterr().out


def test_the_profiled_step_reports_device_time_by_kernel_and_kind(tmp_path):
    mod = _script()
    mod.main(ARGS + ["--out", str(tmp_path)])
    step = json.loads((tmp_path / "mixed-steps.json").read_text())["profiled"][0]
    assert {"top_kernels_by_device_us", "device_ms_by_kind"} <= set(step)    # empty on a CPU: no CUDA kernels
    kinds = mod._by_kind(mod.collections.Counter({
        "Memset (Device)": 3, "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT": 500,
        "void at::native::vectorized_gather_kernel<16, long>(char*)": 40, "chunk_fwd_kernel_o": 200,
        "void at::native::vectorized_elementwise_kernel<8, silu>": 70, "cudnn_generated_fort_native_sdpa": 90,
        "void cudnn::cnn::conv2d_grouped_direct_kernel<bf16>": 30, "_conv_snapshot_kernel": 5}))
    assert kinds == {"memset / memcpy": 3, "GEMM": 500, "copy / gather / scatter": 40,
                     "Triton (fla, the engine's)": 200, "torch elementwise / reduce": 70, "attention": 90,
                     "causal conv1d": 35}
