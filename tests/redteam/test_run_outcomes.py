"""Issue 28 items 5 and 11 (run side): a run that planned nothing passed ("checks failed: 0 of 0",
exit 0); an engine's escape sequences reached the console raw; `reports/latest` named the run that
finished last, not the newest; a full disk gave a traceback and lost the observation (junit.xml was
written in place)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance import paths
from conformance.run import exit_status
from conformance.run import rundir

from ._cli import cli, project_env
from ._forge import forged_engine, reference_observation

CASE = "tiny-dflash-c4-k8"
CASES = ("tiny-dflash-c4-k8", "tiny-dflash-c4-k8-h100")
ESCAPES = "\x1b[2J\x1b[H\x1b]0;pwned\x07ALL CHECKS PASSED \x1b]8;;http://evil.example\x07link\x1b]8;;\x07\rX"


def test_a_run_that_planned_nothing_exits_non_zero_saying_why(tmp_path):
    cold = tmp_path / "cold-cache"
    cold.mkdir()
    ran = cli(["run", "--engines", "vllm,sglang", "--no-build", "--cases", CASE, "--out", str(tmp_path / "r")],
              tmp_path, timeout_s=120, DFLASH_CONFORMANCE_CACHE=str(cold), COLUMNS="300")
    assert ran.rc == 1 and "Traceback" not in ran.err, ran.out[-2000:] + ran.err[-2000:]
    text = " ".join((ran.out + ran.err).split())
    assert "nothing was planned" in text, text[-2000:]
    assert "vllm skipped (venv" in text and "sglang skipped (venv" in text and "--no-build was given" in text


def test_escape_sequences_in_an_engines_message_never_reach_the_console(tmp_path):
    obs = reference_observation()
    obs.update(status="error", message=ESCAPES)
    engine = forged_engine(tmp_path / "e", "escapes", obs)
    ran = cli(["run", "--engines", str(engine), "--cases", CASE, "--out", str(tmp_path / "r")], tmp_path,
              timeout_s=120, COLUMNS="300")
    printed = ran.out + ran.err
    assert ran.rc == exit_status.ENGINE_ERROR and "Traceback" not in printed, printed[-2000:]
    assert "\x1b" not in printed and "\x07" not in printed and "\r" not in printed, repr(printed[-2000:])
    assert "\\x1b[2J" in printed   # shown, harmless
    planned = cli(["plan", "--engine", str(engine), "--case", CASE], tmp_path, timeout_s=120)
    assert "\x1b" not in planned.err and "\\x1b" in planned.err, repr(planned.err[-500:])


def test_latest_names_the_newest_run_by_start_not_the_last_to_finish(tmp_path):
    obs = reference_observation()
    slow = forged_engine(tmp_path / "slow", "slow", obs, delay_s=8)
    fast = forged_engine(tmp_path / "fast", "fast", obs)
    out = tmp_path / "reports"
    argv = lambda e: [sys.executable, "-m", "conformance", "run", "--engines", str(e), "--cases", CASE,  # noqa: E731
                      "--out", str(out)]
    env = project_env(tmp_path)
    first = subprocess.Popen(argv(slow), cwd=str(paths.REPO_ROOT), env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    time.sleep(2.5)   # run ids are by the second: the second run starts in a later one
    second = subprocess.run(argv(fast), cwd=str(paths.REPO_ROOT), env=env, capture_output=True, timeout=120)
    assert first.poll() is None, "the slow run must still be running when the newer one finishes"
    assert first.wait(120) == 0 and second.returncode == 0, second.stderr[-2000:]
    runs = sorted(p.name for p in out.iterdir() if p.is_dir() and not p.is_symlink())   # not latest, not the history store
    assert len(runs) == 2
    newest = max(runs)   # run ids are their start times
    assert os.readlink(out / "latest") == newest
    assert json.loads((out / newest / "observations.jsonl").read_text())["engine"]["name"] == "fast"


def _limited_run(tmp_path: Path, limit_bytes: int, engine: Path) -> tuple[int, str, Path]:
    """`conformance run` under a file-size limit (RLIMIT_FSIZE): a write past it fails as on a full disk."""
    out = tmp_path / "reports"

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    done = subprocess.run([sys.executable, "-m", "conformance", "run", "--engines", str(engine), "--cases", *CASES,
                           "--out", str(out)], cwd=str(paths.REPO_ROOT), env=project_env(tmp_path, COLUMNS="300"),
                          capture_output=True, text=True, timeout=180, preexec_fn=limit)
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and p.name != "latest"]
    return done.returncode, done.stdout + done.stderr, run_dir


@pytest.fixture(scope="module")
def port_obs() -> dict:
    return reference_observation()


def test_a_full_disk_while_writing_the_report_keeps_every_observation(tmp_path, port_obs):
    engine = forged_engine(tmp_path / "e", "port", port_obs)
    size = len(json.dumps(port_obs))
    rc, printed, run_dir = _limited_run(tmp_path, 2 * size + 4096, engine)   # room for the observations only
    assert rc == 1 and "Traceback" not in printed, printed[-3000:]
    text = " ".join(printed.split())
    assert f"could not write {run_dir / 'index.html'}" in text, text[-2000:]
    assert "the 2 observation(s) measured before it are kept" in text and "conformance report" in text
    lines = (run_dir / "observations.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["case_id"] for line in lines) == sorted(CASES)
    assert not (run_dir / "index.html").exists() and not list(run_dir.glob(".index*"))   # no half file, no temp
    again = cli(["report", str(run_dir)], tmp_path, timeout_s=120)   # space freed: the report is written
    assert again.rc == 0 and (run_dir / "index.html").stat().st_size > 1000 and (run_dir / "junit.xml").is_file()


def test_a_full_disk_while_planning_stops_with_a_message_and_keeps_what_was_written(tmp_path, port_obs):
    engine = forged_engine(tmp_path / "e", "port", port_obs)
    size = len(json.dumps(port_obs))
    rc, printed, run_dir = _limited_run(tmp_path, size + size // 2, engine)   # the second observation does not fit
    assert rc == 1 and "Traceback" not in printed, printed[-3000:]
    text = " ".join(printed.split())
    assert f"could not write" in text and "observations.jsonl" in text, text[-2000:]
    got = rundir.read_observations(run_dir)
    assert len(got) == 1 and got[0]["case_id"] in CASES
