"""Throughput ladder on one GPU: the reference engine (2b shapes, DFlash k=8, synthetic mean
acceptance length 4) through its OpenAI server and the process adapter, and plain transformers
generation with the same weights as a peer measured in the same run. See README.md.

    DFLASH_RESULTS_DIR=suites/results pytest -m gpu suites/throughput -s
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from conformance import observation, paths
from conformance.adapters.manifest import load_manifest
from conformance.adapters.process import run_live
from conformance.cases import load_case
from conformance.loadgen import LoadgenSettings, Workload
from conformance.loadgen.compare import throughput_ratios

pytestmark = pytest.mark.gpu

LADDER = (1, 2, 4, 8, 16, 32)
HF_LADDER = (1, 8, 32)          # transformers' GDN path is a PyTorch loop on these shapes: few rungs
K, MEAN_ACCEPTANCE_LENGTH = 8, 4.0
ACCEPTANCE_TOLERANCE = 0.25     # per-rung mean over >= 4 requests of a Bernoulli-free schedule (length 4 is exact)


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.fixture(scope="module")
def results_dir() -> Path:
    d = Path(os.environ.get("DFLASH_RESULTS_DIR") or paths.REPO_ROOT / "suites" / "results")
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> tuple[Path, Path]:
    if not _cuda():
        pytest.skip("needs a CUDA device")
    import torch

    from engine_under_test.model.weights import write_random_checkpoint

    root = tmp_path_factory.mktemp("ckpt")
    target = write_random_checkpoint(paths.MODELS_DIR / "qwen35-2b-shaped", root / "target", seed=0, dtype=torch.bfloat16)
    draft = write_random_checkpoint(paths.MODELS_DIR / "qwen35-2b-dflash-shaped", root / "draft", seed=1,
                                    dtype=torch.bfloat16)
    return target, draft


def _case(tmp: Path, target: Path, draft: Path) -> dict:
    doc = {"id": "throughput-2b-k8-synthetic4", "target": str(target), "draft": str(draft),
           "speculative": {"method": "dflash", "num_speculative_tokens": K},
           "scheduler": {"max_num_seqs": max(LADDER), "max_model_len": 4096, "max_num_batched_tokens": 8192},
           "memory": {"gpu_memory_utilization": 0.85},
           "cache": {"prefix_caching": False, "ssm_dtype": "float32"}, "device": "h200",
           "workload": {"num_requests": 4, "prompt_tokens": 512, "output_tokens": 128, "seed": 0},
           "acceptance": {"mode": "synthetic", "mean_acceptance_length": MEAN_ACCEPTANCE_LENGTH}}
    (tmp / "case.yaml").write_text(yaml.safe_dump(doc))
    return load_case(tmp / "case.yaml").to_json()


def test_reference_ladder_and_hf_peer(checkpoints, results_dir: Path, tmp_path: Path) -> None:
    target, draft = checkpoints
    case = _case(tmp_path, target, draft)
    settings = LoadgenSettings(concurrencies=LADDER, num_warmup_waves=1, min_requests_per_slot=1,
                               request_timeout_s=120, max_rung_duration_s=120)
    ref = run_live(load_manifest("reference"), case, settings, {"device": "cuda"}, log_dir=results_dir,
                   on_rung=lambda r: print(f"reference c={r['concurrency']} {r['status']} {r.get('output_tok_per_s')}"))
    (results_dir / "throughput-reference.json").write_text(json.dumps(ref, indent=2, sort_keys=True))

    import importlib.util

    spec = importlib.util.spec_from_file_location("hf_peer", Path(__file__).with_name("hf_peer.py"))
    hf_peer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hf_peer)
    hf_ladder = hf_peer.hf_ladder

    w = Workload.from_case(case, 248320)
    w = Workload(w.num_requests, w.prompt_tokens, 32, w.seed, w.vocab_size)   # fewer new tokens: HF is slow here
    hf = hf_ladder(case["id"], case["device"], str(target), w, HF_LADDER)
    (results_dir / "throughput-transformers.json").write_text(json.dumps(hf, indent=2, sort_keys=True))
    ratios = throughput_ratios(ref, hf)
    (results_dir / "throughput-ratios.json").write_text(json.dumps({str(c): r for c, r in ratios.items()}, indent=2))
    print("reference / transformers output tok/s:", ratios)

    observation.validate(ref, "reference")
    assert ref["status"] == "ok", ref["message"]
    assert [r["concurrency"] for r in ref["throughput"]["rungs"]] == list(LADDER)
    for r in ref["throughput"]["rungs"]:
        assert r["mean_acceptance_length"] == pytest.approx(MEAN_ACCEPTANCE_LENGTH, abs=ACCEPTANCE_TOLERANCE), r
        assert r["output_tok_per_s"] > 0
    assert ref["device"]["hardware"] and "CPU" not in ref["device"]["hardware"]
    plan = ref["throughput"]["plan"]
    assert plan["max_concurrency"] >= max(LADDER), plan   # the pool seats the top rung
    assert hf["status"] == "ok", hf["message"]
