"""benchmarks/gpu_runtime.py runs on a CPU with tiny shapes and writes valid run observations."""

from __future__ import annotations

import importlib.util
import json

from conformance.documents.observation import validate
from conformance.paths import REPO_ROOT


def test_gpu_runtime_script_on_cpu_tiny(tmp_path):
    spec = importlib.util.spec_from_file_location("gpu_runtime", REPO_ROOT / "benchmarks" / "gpu_runtime.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rc = mod.main(["--device", "cpu", "--tiny", "--out", str(tmp_path), "--max-num-seqs", "2", "--concurrency", "1", "2",
                   "--prompt-tokens", "40", "--max-model-len", "256", "--max-num-batched-tokens", "128",
                   "--warmup-steps", "2", "--timed-steps", "2", "--k", "4", "--lossless-k", "4"])
    files = sorted(tmp_path.glob("*.json"))
    assert len(files) == 1
    obs = validate(json.loads(files[0].read_text()), str(files[0]))
    assert rc == 0, obs["message"]
    assert obs["mode"] == "run" and obs["timing"]["checks"]["lossless_float32_k4"]
    assert obs["timing"]["lossless"]["float32"]["k=4"]["num_draft_tokens"] > 0
    assert [r["concurrency"] for r in obs["throughput"]["rungs"]] == [1, 2]
    assert all(r["ratio_to_floor"] > 1 for r in obs["timing"]["rungs"])
