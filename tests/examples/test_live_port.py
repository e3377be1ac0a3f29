"""The live port (examples/live-port/): the reference engine's server run in-process by
live_port.py, each engine file served on the CPU with tiny shapes through the real process
adapter (`run_live`), one shared case, one short rung. Each defect is seen without timing
anything:

- sound: no `port:injected_sleep_seconds_total` on /metrics; acceptance per position labelled,
  summing to the accepted tokens;
- slow-step: the injected-sleep counter is > 0;
- acceptance-off: its measured mean acceptance length (3.0) is not the sound port's (4.0);
- draft-store-beside-pool: its startup line names a store of the bytes the drafter's config.json
  gives (draft layers x (512 + 16) tokens x 2 x KV heads x head dim x 2 bytes x 4 rows);
- startup-line-disagrees: its parsed plan figures (kv_cache_tokens, max_concurrency) are twice
  the sound port's, while the two engine files' plan modes give the same figures.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
import yaml

from conformance import paths
from conformance.documents import observation
from conformance.documents.cases import load_case
from conformance.engines.manifest import manifest_from_engine_file
from conformance.engines.registry import resolve_engine
from conformance.harness.live import free_port, run_live
from conformance.harness.plan_runner import plan_cases
from conformance.loadgen import LoadgenSettings
from conformance.loadgen.prometheus import parse_samples

PORT_DIR = paths.REPO_ROOT / "examples" / "live-port"
MAX_MODEL_LEN, MAX_NUM_SEQS, K = 512, 4, 8
CASE = {
    "id": "live-port-tiny",
    "target": "tiny-hybrid", "draft": "tiny-dflash",
    "speculative": {"method": "dflash", "num_speculative_tokens": K},
    "scheduler": {"max_num_seqs": MAX_NUM_SEQS, "max_model_len": MAX_MODEL_LEN, "max_num_batched_tokens": 256},
    "memory": {"kv_cache_bytes": 64 * 2**20},
    "cache": {"prefix_caching": False, "ssm_dtype": "float32"},
    "device": "h200",
    "workload": {"num_requests": 2, "prompt_tokens": 16, "output_tokens": 24, "seed": 0},
    "acceptance": {"mode": "synthetic", "mean_acceptance_length": 4.0},
}
SLEEP_COUNTER = "port:injected_sleep_seconds_total"
PER_POS = re.compile(r'^vllm:spec_decode_num_accepted_tokens_per_pos_total\{position="(\d+)"\} (\S+)$', re.M)


@pytest.fixture(scope="module")
def case_file(tmp_path_factory) -> Path:
    f = tmp_path_factory.mktemp("case") / "case.yaml"
    f.write_text(yaml.safe_dump(CASE))
    return f


class Served:
    """One engine file served through the process adapter: its observation, its /metrics text
    after the rung, its log."""

    def __init__(self, engine_file: str, case_file: Path, log_dir: Path):
        spec = resolve_engine(str(PORT_DIR / engine_file))
        port = free_port()
        self.metrics_text = ""

        def read_metrics(_rung: dict) -> None:   # the engine is still up when a rung is done
            self.metrics_text = httpx.get(f"http://127.0.0.1:{port}/metrics", trust_env=False, timeout=10).text

        settings = LoadgenSettings(concurrencies=(2,), num_warmup_waves=0, min_requests_per_slot=1,
                                   request_timeout_s=60, max_rung_duration_s=120)
        self.obs = run_live(manifest_from_engine_file(spec.live, spec.path, spec.name),
                            load_case(case_file).to_json(), settings, {"port": port, "device": "cpu"},
                            log_dir=log_dir, on_rung=read_metrics)
        observation.validate(self.obs, engine_file)
        assert self.obs["status"] == "ok", self.obs.get("message")
        self.log = Path(self.obs["timing"]["log_file"]).read_text()
        self.samples = parse_samples(self.metrics_text)
        self.plan = self.obs["throughput"]["plan"]
        self.mean_acceptance_length = self.obs["throughput"]["rungs"][0]["mean_acceptance_length"]


@pytest.fixture(scope="module")
def serve(case_file, tmp_path_factory):
    done: dict[str, Served] = {}

    def run(engine_file: str) -> Served:
        if engine_file not in done:
            done[engine_file] = Served(engine_file, case_file, tmp_path_factory.mktemp(engine_file.replace(".", "-")))
        return done[engine_file]
    return run


def test_every_live_port_engine_file_is_accepted() -> None:
    for f in ("engine.yaml", "engine-slow.yaml", "engine-acceptance.yaml", "engine-draft-outside.yaml",
              "engine-startup-line.yaml"):
        spec = resolve_engine(str(PORT_DIR / f))
        assert spec.role == "under-test" and spec.live
        m = manifest_from_engine_file(spec.live, spec.path, spec.name)
        assert m.metrics.accepted_tokens_per_pos == "vllm:spec_decode_num_accepted_tokens_per_pos_total"


def test_sound_port_exports_no_sleep_and_acceptance_per_position(serve) -> None:
    sound = serve("engine.yaml")
    assert "live-port: defects=none" in sound.log
    assert SLEEP_COUNTER not in sound.samples
    per_pos = {int(i): float(v) for i, v in PER_POS.findall(sound.metrics_text)}
    assert sorted(per_pos) == list(range(K))
    assert sum(per_pos.values()) == sound.samples["vllm:spec_decode_num_accepted_tokens_total"] > 0
    assert sound.mean_acceptance_length == pytest.approx(4.0, abs=0.25)


def test_slow_step_counts_the_sleep_it_injects(serve) -> None:
    slow = serve("engine-slow.yaml")
    assert "live-port: defects=slow-step" in slow.log
    assert slow.samples[SLEEP_COUNTER] > 0
    assert f"# TYPE {SLEEP_COUNTER.removesuffix('_total')} counter" in slow.metrics_text


def test_acceptance_off_measures_another_acceptance_than_the_sound_port(serve) -> None:
    sound, off = serve("engine.yaml"), serve("engine-acceptance.yaml")
    assert "synthetic_acceptance_length 4.0 served as 3.0" in off.log
    assert off.mean_acceptance_length == pytest.approx(3.0, abs=0.25)
    assert abs(off.mean_acceptance_length - sound.mean_acceptance_length) > 0.5


def test_draft_store_beside_pool_prints_the_store_it_allocated(serve) -> None:
    outside = serve("engine-draft-outside.yaml")
    cfg = json.loads((paths.MODELS_DIR / "tiny-dflash" / "config.json").read_text())
    tokens = -(-MAX_MODEL_LEN // 16) * 16 + 16
    expected = (cfg["num_hidden_layers"] * tokens * 2 * cfg["num_key_value_heads"] * cfg["head_dim"]
                * {"bfloat16": 2, "float32": 4}[cfg["torch_dtype"]] * MAX_NUM_SEQS)
    m = re.search(r"live-port draft-store: beside the pool bytes=(\d+) rows=(\d+) .*device=(\w+)", outside.log)
    assert m, outside.log
    assert (int(m.group(1)), int(m.group(2)), m.group(3)) == (expected, MAX_NUM_SEQS, "cpu")
    assert "draft-store" not in serve("engine.yaml").log


def test_startup_line_disagrees_with_the_same_plan(serve, case_file) -> None:
    sound, wrong = serve("engine.yaml"), serve("engine-startup-line.yaml")
    planned = [plan_cases(resolve_engine(str(PORT_DIR / f)), [load_case(case_file)])[0]
               for f in ("engine.yaml", "engine-startup-line.yaml")]
    assert [p["status"] for p in planned] == ["ok", "ok"]
    assert planned[1]["memory"] == planned[0]["memory"] and planned[0]["memory"]["max_concurrency"] > 0
    assert "live-port: defects=startup-line-disagrees" in wrong.log
    # int(2 x c x L) against int(c x L): twice the sound port's figure, or one more
    assert wrong.plan["kv_cache_tokens"] - 2 * sound.plan["kv_cache_tokens"] in (0, 1)
    assert wrong.plan["max_concurrency"] == pytest.approx(2 * sound.plan["max_concurrency"], abs=0.015)
    assert sound.plan["kv_cache_tokens"] > 0
    assert wrong.plan["max_num_scheduled_tokens"] == sound.plan["max_num_scheduled_tokens"]
