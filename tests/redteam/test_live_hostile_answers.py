"""Issue 28 items 7, 9 and 11 on the live path, through the real `conformance ladder` against a real
server (`_hostile_server.py`) started by an engine file's `live:` section:

- item 9: a hostile answer (usage.completion_tokens "many", /v1/models {"data": [null]}, a startup
  figure `max_concurrency=1.2.3`, an accepted-tokens counter of +Inf, a running gauge of 1e999)
  never gives a traceback: an `error` observation saying what was wrong, or the rung measured
  without the figure; the sampler thread survives bad gauge values, and a label shorter than one
  sample interval still gets a sample;
- item 7: a launcher that detaches the server (`nohup ... &`) and exits: the server is watched
  while the ladder runs and does not outlive it;
- item 11: an interrupted ladder (SIGINT, SIGTERM) writes `--out` with the rungs measured so far.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance import paths
from conformance.harness.live_sampler import LiveSampler

from ._cli import cli, project_env

SERVER = Path(__file__).resolve().with_name("_hostile_server.py")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _engine(tmp_path: Path, attack: str, launcher: bool = False) -> Path:
    pid_file = tmp_path / "server.pids"
    server = [sys.executable, str(SERVER), "--port", "{port}", "--pid-file", str(pid_file), "--attack", attack]
    if launcher:   # a launcher script that detaches the server and exits at once
        command = ["sh", "-c", "nohup " + " ".join(json.dumps(a) for a in server) + " >/dev/null 2>&1 &"]
    else:
        command = server
    doc = {"name": f"hostile-{attack}", "role": "under-test", "version": "1", "plan": {"command": {"argv": ["true"]}},
           "live": {"version": "1", "command": command, "health_url": "http://{host}:{port}/health",
                    "base_url": "http://{host}:{port}", "startup_timeout_s": 60, "stop_timeout_s": 5,
                    "metrics": {"running_requests": "vllm:num_requests_running",
                                "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
                                "drafts": "vllm:spec_decode_num_drafts_total"},
                    "startup_regexes": {"max_concurrency": r"max_concurrency=(\S+)"}}}
    path = tmp_path / f"{attack}.yaml"
    path.write_text(json.dumps(doc))
    return path


LADDER = ["--case", "tiny-dflash-c4-k8", "--concurrency", "1,2", "--warmup-waves", "0", "--min-requests-per-slot", "1",
          "--request-timeout-s", "20"]


def _ladder(tmp_path: Path, engine: Path) -> tuple[object, dict | None]:
    out = tmp_path / "obs.json"
    ran = cli(["ladder", "--engine", str(engine), *LADDER, "--out", str(out)], tmp_path, timeout_s=120)
    assert "Traceback" not in ran.err + ran.out, (ran.err + ran.out)[-4000:]
    return ran, json.loads(out.read_text()) if out.exists() else None


def _servers_gone(tmp_path: Path, within_s: float = 10.0) -> None:
    pids = [int(p) for p in (tmp_path / "server.pids").read_text().split()]
    deadline = time.monotonic() + within_s
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in pids if _alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    assert not left, f"server(s) {left} outlived the ladder"


@pytest.mark.parametrize("attack,says", [
    ("usage-many", "usage.completion_tokens is 'many', not a count of tokens"),
    ("models-null", "names no served model"),
    ("startup-figure", "startup_regexes.max_concurrency"),
])
def test_a_hostile_answer_is_an_error_observation_naming_it(tmp_path, attack, says):
    ran, obs = _ladder(tmp_path, _engine(tmp_path, attack))
    assert ran.rc == 1, ran.err[-3000:]
    assert obs is not None and obs["status"] == "error", ran.err[-3000:]
    assert says in obs["message"], obs["message"][:2000]
    _servers_gone(tmp_path)


def test_an_infinite_counter_keeps_the_rungs_measured(tmp_path):
    ran, obs = _ladder(tmp_path, _engine(tmp_path, "counter-inf"))
    assert obs is not None, ran.err[-3000:]
    rungs = obs["throughput"]["rungs"]
    assert [(r["concurrency"], r["status"]) for r in rungs] == [(1, "ok"), (2, "ok")], obs["message"]
    assert all(r["mean_acceptance_length"] is None and r["output_tok_per_s"] > 0 for r in rungs)


def test_a_huge_gauge_does_not_kill_the_sampler(tmp_path):
    ran, obs = _ladder(tmp_path, _engine(tmp_path, "gauge-huge"))
    assert obs is not None, ran.err[-3000:]
    live = obs["throughput"]["live"]
    assert live["by_phase"]["c=2"]["max_running_requests"] is not None, live
    assert any("1e999" in n for n in live["notes"]), live["notes"]
    assert "live.concurrency_served" in ran.out and "running requests not measured" not in ran.out, ran.out[-2000:]


def test_a_label_shorter_than_one_interval_still_gets_a_sample(tmp_path):
    engine = subprocess.Popen([sys.executable, str(SERVER), "--port", "0", "--pid-file", str(tmp_path / "p")],
                              stdout=subprocess.PIPE, text=True)
    try:
        port = int(engine.stdout.readline().rsplit("port=", 1)[1])
        sampler = LiveSampler(engine.pid, f"http://127.0.0.1:{port}/metrics", "vllm:num_requests_running",
                              interval_s=30.0)
        sampler.start()
        for label in ("c=1", "c=2", "c=4"):
            sampler.mark(label)
        sampler.stop()
        by = sampler.summary()["by_phase"]
        assert all(by.get(label, {}).get("num_samples", 0) >= 1 for label in ("c=1", "c=2", "c=4")), by
        assert by["c=4"]["max_running_requests"] == 0, by
    finally:
        engine.kill()
        engine.wait()


def test_a_launcher_that_detaches_its_server_is_followed_and_cleaned_up(tmp_path):
    ran, obs = _ladder(tmp_path, _engine(tmp_path, "none", launcher=True))
    assert obs is not None and obs["status"] == "ok", (obs or {}).get("message", ran.err[-3000:])
    assert [r["status"] for r in obs["throughput"]["rungs"]] == ["ok", "ok"]
    _servers_gone(tmp_path)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_ladder_writes_the_rungs_measured_so_far(tmp_path, sig):
    engine = _engine(tmp_path, "none")
    out = tmp_path / "obs.json"
    argv = [sys.executable, "-m", "conformance", "ladder", "--engine", str(engine), "--case", "tiny-dflash-c4-k8",
            "--concurrency", "1,2,4,8,16,32,64,128", "--warmup-waves", "0", "--min-requests-per-slot", "40",
            "--out", str(out)]
    proc = subprocess.Popen(argv, env=project_env(tmp_path), cwd=str(paths.REPO_ROOT), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    seen = ""
    while "ladder: c=1 ok" not in seen and time.monotonic() < deadline:   # one rung measured
        line = proc.stderr.readline()
        if not line:
            break
        seen += line
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, (seen + stderr)[-3000:]
    assert "Traceback" not in seen + stderr, (seen + stderr)[-3000:]
    obs = json.loads(out.read_text())
    assert obs["status"] == "error" and "interrupted" in obs["message"], obs["message"]
    assert obs["throughput"]["rungs"][0]["concurrency"] == 1 and obs["throughput"]["rungs"][0]["status"] == "ok"
    _servers_gone(tmp_path)
