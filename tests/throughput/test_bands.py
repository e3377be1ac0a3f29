"""The throughput bands (`bands.py`): pure judging of a ladder against its golden, on the committed
golden of one H200 and on runs derived from it; and, on a real tiny ladder on the CPU, a run of
the live port slowed after every step (examples/live-port, defect `slow-step`, sleeping ten times
each step's own wall time) judged outside the bands of an unslowed run of the reference."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import yaml

from conformance import paths

GOLDEN = paths.REPO_ROOT / "goldens" / "throughput" / "test_throughput_gpu" / "test_reference_ladder_and_hf_peer.json"


SUITE_DIR = paths.REPO_ROOT / "suites" / "throughput"   # the suite these tests exercise


def _sibling(name: str):
    key = f"_throughput_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, SUITE_DIR / f"{name}.py")
        sys.modules[key] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[key])
    return sys.modules[key]


def _scaled(view: dict, tok: float = 1.0, lat: float = 1.0) -> dict:
    out = copy.deepcopy(view)
    for r in out["rungs"]:
        r["output_tok_per_s"] *= tok
        for k in ("ttft_ms_p50", "tpot_ms_p50", "itl_ms_p50"):
            r[k] *= lat
    return out


def test_committed_golden_is_a_throughput_view_of_one_h200() -> None:
    golden = json.loads(GOLDEN.read_text())
    assert golden["kind"] == "throughput-golden" and golden["card"] == "NVIDIA H200 (139.8 GiB)"
    assert [r["concurrency"] for r in golden["rungs"]] == [1, 2, 4, 8, 16, 32]
    assert all(r["mean_acceptance_length"] == 4.0 for r in golden["rungs"])


def test_judge_passes_inside_and_fails_outside_each_band() -> None:
    b = _sibling("bands")
    golden = json.loads(GOLDEN.read_text())
    assert b.judge(golden, golden).passed
    assert b.judge(golden, _scaled(golden, tok=0.8, lat=1.3)).passed
    slow = b.judge(golden, _scaled(golden, tok=0.7))
    assert slow.status == "fail" and "output tok/s" in slow.message and "0.70" in slow.message
    for key, ratio in (("ttft_ms_p50", 1.8), ("tpot_ms_p50", 1.4), ("itl_ms_p50", 1.6)):
        live = copy.deepcopy(golden)
        live["rungs"][2][key] *= ratio
        v = b.judge(golden, live)
        assert v.status == "fail" and "c=4" in v.message, (key, v)
    live = copy.deepcopy(golden)
    live["rungs"][0]["mean_acceptance_length"] = 3.5
    assert "acceptance" in b.judge(golden, live).message


def test_other_card_is_not_comparable_and_missing_rungs_are_listed() -> None:
    b = _sibling("bands")
    golden = json.loads(GOLDEN.read_text())
    other = dict(_scaled(golden, tok=0.3), card="NVIDIA H100 80GB HBM3", hardware="one NVIDIA H100 80GB HBM3")
    assert b.judge(golden, other).status == "not_comparable"
    partial = dict(golden, rungs=golden["rungs"][:2])
    v = b.judge(golden, partial)
    assert v.passed and "not run live: c=4, 8, 16, 32" in v.message
    assert b.judge(golden, dict(golden, rungs=[])).status == "fail"
    assert b.card_kind("one NVIDIA H200 (139.8 GiB) [GPU-1], driver 580, CUDA 13.0, torch 2.11") == "NVIDIA H200 (139.8 GiB)"


def _slowed_port(directory: Path, ratio: float) -> Path:
    """The live port's slow-step engine file, sleeping `ratio` x each step's wall time."""
    doc = yaml.safe_load((paths.REPO_ROOT / "examples" / "live-port" / "engine-slow.yaml").read_text())
    doc["live"]["command"] += ["--slow-step-ratio", str(ratio)]
    out = directory / "engine-slowed.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out


def test_slowed_engine_step_is_judged_outside_the_bands(tmp_path: Path, monkeypatch) -> None:
    lr, b = _sibling("ladder_run"), _sibling("bands")
    plan = dataclasses.replace(lr.plan_from_env({"DFLASH_THROUGHPUT_SHAPES": "tiny"}), concurrencies=(2,),
                               hf_concurrencies=(1,))
    ref, _, _ = lr.run_throughput(plan, tmp_path / "normal", tmp_path / "work-normal")
    golden = b.throughput_view(ref)
    assert b.judge(golden, golden).passed
    monkeypatch.setenv("DFLASH_THROUGHPUT_ENGINE", str(_slowed_port(tmp_path, 10)))   # the suite's engine
    slowed, _, _ = lr.run_throughput(plan, tmp_path / "slowed", tmp_path / "work-slowed")
    assert slowed["status"] == "ok", slowed["message"]
    verdict = b.judge(golden, b.throughput_view(slowed))
    assert verdict.status == "fail" and "ITL p50 ms" in verdict.message, verdict.message
