"""The reference engine's HTTP server, run for real as `python -m engine_under_test.serve` on tiny shapes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from conformance import paths
from conformance.loadgen.prometheus import parse_samples

MODELS = paths.MODELS_DIR
K = 8
SPEC = {"method": "dflash", "num_speculative_tokens": K, "model": str(MODELS / "tiny-dflash"),
        "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 4.0}
ENGINE_KW = dict(max_num_seqs=4, max_model_len=512, max_num_batched_tokens=256, kv_cache_memory_bytes=64 * 2**20)


def _argv(**extra: str) -> list[str]:
    argv = [sys.executable, "-m", "engine_under_test.serve", "--model", str(MODELS / "tiny-hybrid"),
            "--speculative-config", json.dumps(SPEC), "--max-num-seqs", "4", "--max-model-len", "512",
            "--max-num-batched-tokens", "256", "--kv-cache-memory-bytes", str(64 * 2**20), "--port", "0", "--seed", "0"]
    for k, v in extra.items():
        argv += [f"--{k.replace('_', '-')}", v]
    return argv


def _start(argv: list[str], log: Path) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, PYTHONPATH=str(paths.REPO_ROOT), PYTHONUNBUFFERED="1")
    fh = log.open("w")
    proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        m = re.search(r"reference-engine serving: model=\S+ url=(http://\S+)", log.read_text())
        if m:
            return proc, m.group(1)
        if proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}:\n{log.read_text()}")
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"server did not start:\n{log.read_text()}")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("serve") / "server.log"
    proc, url = _start(_argv(), log)
    yield url, proc, log
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _post(url: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}/v1/completions", json=body, timeout=60, trust_env=False)


def test_health_models_and_plan_line(server) -> None:
    url, _, log = server
    assert httpx.get(f"{url}/health", trust_env=False).status_code == 200
    models = httpx.get(f"{url}/v1/models", trust_env=False).json()
    assert models["data"][0]["id"] == "tiny-hybrid"
    line = re.search(r"reference-engine plan: (.*)", log.read_text()).group(1)
    figures = dict(kv.split("=") for kv in line.split())
    # the same figures from the engine's own planner, computed here independently of the server
    from engine_under_test.llm import LLM

    plan = LLM(MODELS / "tiny-hybrid", SPEC, load_format="dummy", **ENGINE_KW).engine.plan
    assert int(figures["kv_cache_tokens"]) == int(plan.memory.max_concurrency * 512)
    assert int(figures["max_num_scheduled_tokens"]) == plan.budget.max_num_scheduled_tokens
    assert int(figures["num_blocks"]) == plan.memory.layout.num_blocks


def test_greedy_completion_equals_offline_llm(server) -> None:
    url, _, _ = server
    prompts = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]
    resp = _post(url, {"prompt": prompts, "max_tokens": 10, "temperature": 0, "ignore_eos": True})
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    from engine_under_test.llm import LLM, SamplingParams

    llm = LLM(MODELS / "tiny-hybrid", SPEC, load_format="dummy", seed=0, dtype=None, **ENGINE_KW)
    want = [o.output_token_ids for o in llm.generate(prompts, SamplingParams(max_tokens=10, temperature=0, ignore_eos=True))]
    assert [c["token_ids"] for c in doc["choices"]] == want
    assert doc["usage"] == {"prompt_tokens": 9, "completion_tokens": 20, "total_tokens": 29}
    assert doc["choices"][0]["text"] == "".join(f" {t}" for t in want[0])


def test_stream_chunks_concatenate_to_the_completion(server) -> None:
    url, _, _ = server
    body = {"prompt": [21, 22, 23, 24], "max_tokens": 17, "temperature": 0, "ignore_eos": True}
    whole = _post(url, body).json()["choices"][0]["token_ids"]
    chunks, done = [], False
    with httpx.stream("POST", f"{url}/v1/completions", json={**body, "stream": True,
                      "stream_options": {"include_usage": True}}, timeout=60, trust_env=False) as r:
        for line in r.iter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                chunks.append(json.loads(line[6:]))
    assert done
    tokens = [t for c in chunks for ch in c["choices"] for t in ch["token_ids"]]
    assert tokens == whole
    assert chunks[-1]["usage"]["completion_tokens"] == 17 and chunks[-1]["choices"] == []
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    # speculation: some chunk carries more than one token (synthetic acceptance length 4)
    assert max(len(ch["token_ids"]) for c in chunks[:-1] for ch in c["choices"]) > 1


def test_metrics_counters_follow_requests(server) -> None:
    url, _, _ = server
    before = parse_samples(httpx.get(f"{url}/metrics", trust_env=False).text)
    _post(url, {"prompt": [30, 31, 32], "max_tokens": 25, "temperature": 0, "ignore_eos": True})
    after = parse_samples(httpx.get(f"{url}/metrics", trust_env=False).text)
    d = {k: after[k] - before.get(k, 0) for k in after}
    assert d["vllm:generation_tokens_total"] == 25 and d["vllm:prompt_tokens_total"] == 3
    assert d["reference:num_requests_total"] == 1
    drafts = d["vllm:spec_decode_num_draft_tokens_total"] / K
    assert drafts > 0 and 1 + d["vllm:spec_decode_num_accepted_tokens_total"] / drafts == pytest.approx(4.0, abs=0.5)
    assert 0 <= after["vllm:kv_cache_usage_perc"] <= 1


@pytest.mark.parametrize("body, needle", [
    ({"prompt": "hello", "max_tokens": 4}, "no tokenizer"),
    ({"prompt": [1, 2, 99999], "max_tokens": 4}, "token ids must be integers in [0, 1024)"),
    ({"prompt": [1, 2], "max_tokens": 600}, "maximum context length is 512"),
    ({"prompt": [1, 2], "max_tokens": 0}, "max_tokens"),
])
def test_bad_requests_are_400_with_a_message(server, body, needle) -> None:
    url, _, _ = server
    resp = _post(url, body)
    assert resp.status_code == 400 and needle in resp.json()["error"]["message"]


def test_sigterm_stops_cleanly(tmp_path) -> None:
    proc, url = _start(_argv(), tmp_path / "s.log")
    assert httpx.get(f"{url}/health", trust_env=False).status_code == 200
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert "reference-engine stopped" in (tmp_path / "s.log").read_text()


def test_refused_configuration_exits_3_with_the_engine_message(tmp_path) -> None:
    argv = _argv()
    argv[argv.index("--kv-cache-memory-bytes") + 1] = "4096"   # far too small for one sequence
    log = tmp_path / "r.log"
    env = dict(os.environ, PYTHONPATH=str(paths.REPO_ROOT))
    rc = subprocess.run(argv, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, timeout=120).returncode
    assert rc == 3 and "reference-engine refused:" in log.read_text()
