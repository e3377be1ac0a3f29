"""Issue 28 items 4 and 8, against a real reference server (`python -m engine_under_test.serve`, tiny
shapes, every step slowed so that requests pile up): `vllm:num_requests_running` counts the requests
the scheduler runs, never more than max_num_seqs, and `vllm:num_requests_waiting` the ones queued
(as vLLM's gauges), so `live.concurrency_served` judges the reference's own figures right at a rung
above max_num_seqs; a client that hangs up (streamed or not) has its requests aborted at once; a
batch of prompts past the server's limit is a 400 naming the limit."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import threading
import time
from urllib.parse import urlparse

import httpx
import pytest

from conformance import paths
from conformance.checks import verdicts
from conformance.checks.live import live_concurrency_served
from conformance.checks.row import CheckInput
from conformance.harness.live_sampler import LiveSampler
from engine_under_test.serve import request
from tests.engine_under_test.serve.test_server import _argv, _start

MAX_NUM_SEQS = 2
SLOW_STEP_RATIO = "4"   # each step followed by four times its own wall time asleep: requests pile up
LIVE_PORT = paths.REPO_ROOT / "examples" / "live-port" / "live_port.py"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The reference's own server, each step slowed from outside by the live port's slow-step defect (the
    engine has no knob for it)."""
    log = tmp_path_factory.mktemp("serve-gauges") / "server.log"
    argv = _argv(max_num_seqs=str(MAX_NUM_SEQS))
    argv = [argv[0], str(LIVE_PORT), *argv[3:], "--defects", "slow-step", "--slow-step-ratio", SLOW_STEP_RATIO]
    proc, url = _start(argv, log)
    assert "live-port: defects=slow-step" in log.read_text()
    yield url, proc, log
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _gauges(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=10, trust_env=False).text
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^(vllm:num_requests_(?:running|waiting)) (\S+)$", text, re.MULTILINE)}


def _wait_idle(url: str, timeout_s: float) -> dict[str, float]:
    deadline = time.monotonic() + timeout_s
    g = _gauges(url)
    while time.monotonic() < deadline and (g.get("vllm:num_requests_running", 1) or g.get("vllm:num_requests_waiting", 1)):
        time.sleep(0.1)
        g = _gauges(url)
    return g


def test_running_gauge_counts_scheduled_requests_only_and_waiting_is_exported(server):
    url = server[0]
    concurrency = 4 * MAX_NUM_SEQS
    sampler = LiveSampler(server[1].pid, f"{url}/metrics", "vllm:num_requests_running", interval_s=0.02)
    sampler.start()
    sampler.mark(f"c={concurrency}")
    waiting_seen: list[float] = []

    def one() -> None:
        httpx.post(f"{url}/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 24, "ignore_eos": True},
                   timeout=120, trust_env=False).raise_for_status()

    threads = [threading.Thread(target=one) for _ in range(concurrency)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        waiting_seen.append(_gauges(url).get("vllm:num_requests_waiting", -1))
        time.sleep(0.05)
    for t in threads:
        t.join()
    sampler.stop()
    summary = sampler.summary()
    got = summary["by_phase"][f"c={concurrency}"]["max_running_requests"]
    assert got == MAX_NUM_SEQS, summary
    assert max(waiting_seen) >= 1, f"vllm:num_requests_waiting never showed the queued requests: {waiting_seen}"
    obs = {"status": "ok", "engine": {"name": "reference"}, "case_id": "x",
           "throughput": {"live": dict(summary, top_rung=f"c={concurrency}", mode="closed")}}
    verdict = live_concurrency_served(CheckInput(obs, {"scheduler": {"max_num_seqs": MAX_NUM_SEQS}}))
    assert verdict.outcome == verdicts.PASS, verdict.message


def _hang_up_after(url: str, body: dict, wait_s: float) -> None:
    u = urlparse(url)
    data = json.dumps(body).encode()
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        time.sleep(wait_s)


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_hangs_up_has_its_requests_aborted(server, stream):
    url = server[0]
    body = {"prompt": [1, 2, 3], "max_tokens": 400, "ignore_eos": True, "stream": stream}
    threads = [threading.Thread(target=_hang_up_after, args=(url, body, 0.5)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 400 tokens at 40 ms a step take ~16 s per pair of requests: gone within 8 s (a loaded host) means aborted
    g = _wait_idle(url, 8.0)
    assert g.get("vllm:num_requests_running") == 0 and g.get("vllm:num_requests_waiting") == 0, \
        f"requests of clients that hung up still in the engine: {g}"
    t0 = time.monotonic()
    r = httpx.post(f"{url}/v1/completions", json={"prompt": [1, 2], "max_tokens": 2}, timeout=60, trust_env=False)
    assert r.status_code == 200 and time.monotonic() - t0 < 5, (r.status_code, time.monotonic() - t0)


def test_a_batch_of_prompts_past_the_limit_is_a_400_naming_it(server):
    url = server[0]
    r = httpx.post(f"{url}/v1/completions", json={"prompt": [[1]] * 20_000, "max_tokens": 16},
                   timeout=60, trust_env=False)
    assert r.status_code == 400, r.text[:500]
    err = r.json()["error"]
    assert err["param"] == "prompt" and "MAX_PROMPTS_PER_REQUEST" in err["message"], err
    assert str(getattr(request, "MAX_PROMPTS_PER_REQUEST", "(no limit)")) in err["message"]
    assert _wait_idle(url, 2.0).get("vllm:num_requests_running") == 0
    ok = httpx.post(f"{url}/v1/completions", json={"prompt": [[1, 2]] * 3, "max_tokens": 2}, timeout=60,
                    trust_env=False)
    assert ok.status_code == 200 and len(ok.json()["choices"]) == 3, ok.text[:500]
