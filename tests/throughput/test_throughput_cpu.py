"""The GPU throughput suite's code paths on the CPU: preset `tiny` (tiny shapes, a 2-rung ladder),
the same run, files, scrubbing and pass criteria as `test_throughput_gpu.py`."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from conformance import paths

SUITE_DIR = paths.REPO_ROOT / "suites" / "throughput"   # the suite these tests exercise


def _sibling(name: str):
    key = f"_throughput_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, SUITE_DIR / f"{name}.py")
        sys.modules[key] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[key])
    return sys.modules[key]


def test_tiny_ladder_on_cpu_writes_portable_valid_results(tmp_path: Path) -> None:
    lr, gpu = _sibling("ladder_run"), _sibling("test_throughput_gpu")
    plan = lr.plan_from_env({"DFLASH_THROUGHPUT_SHAPES": "tiny"})
    results = tmp_path / "results"
    ref, hf, ratios = lr.run_throughput(plan, results, tmp_path / "work")
    gpu.check_run(lr, plan, results, ref, hf)
    written = json.loads((results / "throughput-reference.json").read_text())
    assert written == ref and "<checkpoints>/target" in written["provenance"]["mapping"]["argv"]
    assert written["timing"]["log_file"].startswith("<results>/reference-")
    for r in hf["throughput"]["rungs"]:
        assert r["ttft_ms"]["median"] > 0 and r["tpot_ms"]["median"] > 0
        assert r["num_output_tokens"] == r["concurrency"] * plan.hf_output_tokens
    assert set(ratios["output_tok_per_s_reference_over_transformers"]) == {"1", "2"}
    assert all(v > 0 for v in ratios["tpot_transformers_over_reference"].values())


def test_plan_from_env() -> None:
    lr = _sibling("ladder_run")
    assert lr.plan_from_env({}) == lr.PRESETS["2b"]
    plan = lr.plan_from_env({"DFLASH_THROUGHPUT_LADDER": "1,4", "DFLASH_THROUGHPUT_HF_LADDER": "2"})
    assert plan == dataclasses.replace(lr.PRESETS["2b"], concurrencies=(1, 4), hf_concurrencies=(2,))
    for env, word in (({"DFLASH_THROUGHPUT_SHAPES": "7b"}, "known presets"),
                      ({"DFLASH_THROUGHPUT_LADDER": "4,1"}, "DFLASH_THROUGHPUT_LADDER"),
                      ({"DFLASH_THROUGHPUT_HF_LADDER": "x"}, "DFLASH_THROUGHPUT_HF_LADDER")):
        with pytest.raises(ValueError, match=word):
            lr.plan_from_env(env)


def test_scrub_leaves_no_local_path() -> None:
    lr = _sibling("ladder_run")
    doc = {"argv": ["/opt/py/bin/python", "--model", "/tmp/x/ckpt/target"], "n": 3}
    out = lr.scrub(doc, [("/tmp/x/ckpt", "<checkpoints>"), ("/opt/py/bin/python", "<python>")])
    assert out == {"argv": ["<python>", "--model", "<checkpoints>/target"], "n": 3}
    assert lr.local_paths(json.dumps(out)) == [] and lr.local_paths(json.dumps(doc))
