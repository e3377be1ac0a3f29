"""The process adapter driving the reference engine's server (CPU, tiny shapes, a short ladder)."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest
import yaml

from conformance import paths
from conformance.documents import observation
from conformance.documents.cases import load_case
from conformance.engines.manifest import load_manifest
from conformance.harness.live import run_live
from conformance.loadgen import LoadgenSettings

CASE = {
    "id": "live-tiny-c2",
    "target": "tiny-hybrid", "draft": "tiny-dflash",
    "speculative": {"method": "dflash", "num_speculative_tokens": 8},
    "scheduler": {"max_num_seqs": 4, "max_model_len": 512, "max_num_batched_tokens": 256},
    "memory": {"kv_cache_bytes": 64 * 2**20},
    "cache": {"prefix_caching": False, "ssm_dtype": "float32"},
    "device": "h200",
    "workload": {"num_requests": 2, "prompt_tokens": 16, "output_tokens": 12, "seed": 0},
    "acceptance": {"mode": "synthetic", "mean_acceptance_length": 4.0},
}


def _case(tmp_path: Path, **workload) -> dict:
    doc = dict(CASE, workload={**CASE["workload"], **workload})
    f = tmp_path / "case.yaml"
    f.write_text(yaml.safe_dump(doc))
    return load_case(f).to_json()


def test_ladder_on_the_reference_server(tmp_path: Path) -> None:
    case = _case(tmp_path)
    settings = LoadgenSettings(concurrencies=(1, 2), num_warmup_waves=1, request_timeout_s=60)
    obs = run_live(load_manifest("reference"), case, settings, log_dir=tmp_path)
    observation.validate(obs, "test")
    assert obs["status"] == "ok", obs["message"]
    assert obs["mode"] == "run" and obs["engine"]["name"] == "reference" and obs["engine"]["version"] != "unknown"
    assert obs["device"]["hardware"]
    rungs = obs["throughput"]["rungs"]
    assert [(r["concurrency"], r["status"]) for r in rungs] == [(1, "ok"), (2, "ok")]
    for r in rungs:
        assert r["output_tok_per_s"] > 0 and r["num_output_tokens"] == r["num_requests"] * 12
        assert r["ttft_ms"]["median"] > 0 and r["tpot_ms"]["median"] > 0
        assert r["mean_acceptance_length"] == pytest.approx(4.0, abs=0.5)
    plan = obs["throughput"]["plan"]
    from engine_under_test.llm import LLM

    engine_plan = LLM(paths.MODELS_DIR / "tiny-hybrid", {"method": "dflash", "num_speculative_tokens": 8,
                      "model": str(paths.MODELS_DIR / "tiny-dflash")}, max_num_seqs=4, max_model_len=512,
                      max_num_batched_tokens=256, kv_cache_memory_bytes=64 * 2**20, load_format="dummy",
                      dtype="bfloat16").engine.plan   # the manifest serves in the case's KV dtype, as planned
    assert plan["max_num_scheduled_tokens"] == engine_plan.budget.max_num_scheduled_tokens
    assert plan["kv_cache_tokens"] == int(engine_plan.memory.max_concurrency * 512)
    assert "--kv-cache-memory-bytes" in obs["provenance"]["mapping"]["argv"]
    assert [t["concurrency"] for t in obs["timing"]["rungs"]] == [1, 2] and obs["timing"]["wall_s"] > 0


def test_killing_the_engine_mid_ladder_keeps_measured_rungs(tmp_path: Path) -> None:
    case = _case(tmp_path, num_requests=4, output_tokens=48)
    settings = LoadgenSettings(concurrencies=(1, 2, 4), num_warmup_waves=0, request_timeout_s=60)
    engine_box: list = []
    killers: list[threading.Timer] = []

    def on_rung(rung: dict) -> None:
        if rung["concurrency"] == 1:   # kill the server while the c=2 rung is in flight
            t = threading.Timer(0.5, lambda: os.kill(engine_box[0].proc.pid, signal.SIGKILL))
            killers.append(t)
            t.start()

    obs = run_live(load_manifest("reference"), case, settings, log_dir=tmp_path, on_rung=on_rung,
                   on_started=engine_box.append)
    for t in killers:
        t.join()
    observation.validate(obs, "test")
    assert obs["status"] == "error"
    rungs = obs["throughput"]["rungs"]
    assert rungs[0]["concurrency"] == 1 and rungs[0]["status"] == "ok" and rungs[0]["output_tok_per_s"] > 0
    assert [r["concurrency"] for r in rungs] == [1, 2] and rungs[1]["status"] == "error"
    assert "engine was killed by SIGKILL" in rungs[1]["message"]
    assert "--- engine log" in obs["message"] and "reference-engine serving:" in obs["message"]
    assert engine_box[0].proc.poll() is not None


def test_engine_that_refuses_gives_a_refused_observation(tmp_path: Path) -> None:
    case = _case(tmp_path)
    case["memory"] = {"kv_cache_bytes": 4096}
    obs = run_live(load_manifest("reference"), case, LoadgenSettings(concurrencies=(1,)), log_dir=tmp_path)
    observation.validate(obs, "test")
    assert obs["status"] == "refused" and "reference-engine refused:" in obs["message"]
    assert obs["throughput"] is None
