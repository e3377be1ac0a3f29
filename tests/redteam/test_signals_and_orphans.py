"""Issue item 3: SIGTERM is treated like SIGINT by `conformance run` (partial report, junit.xml,
latest moved, exit 143), no adapter or engine child outlives the run, not even one that called
setsid, not even when the run is SIGKILLed; two SIGINTs in a row still leave a whole report and no
stray temp file. Item 10: the engine that was mid-plan is marked interrupted, not planned."""

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

from ._cli import project_env

HANG = Path(__file__).resolve().with_name("_hang_engine.py")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _start(tmp_path: Path, engines: str) -> tuple[subprocess.Popen, Path, Path]:
    engine = tmp_path / "hang.yaml"
    engine.write_text(f"name: hang\nrole: under-test\nversion: '1'\nplan:\n  command:\n"
                      f"    argv: [{json.dumps(sys.executable)}, {json.dumps(str(HANG))}]\n    timeout_s: 600\n")
    pids = tmp_path / "pids"
    out = tmp_path / "reports"
    env = project_env(tmp_path, HANG_PIDS=str(pids))
    proc = subprocess.Popen([sys.executable, "-m", "conformance", "run", "--engines", engines.replace("HANG", str(engine)),
                             "--cases", "tiny-dflash-c4-k8", "--out", str(out)], env=env, cwd=str(paths.REPO_ROOT),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not pids.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the hanging engine never started:\n{proc.communicate()[0][-3000:]}")
        time.sleep(0.1)
    return proc, out, pids


def _assert_gone(pids: Path, within_s: float = 10.0) -> None:
    child, grandchild = map(int, pids.read_text().split())
    deadline = time.monotonic() + within_s
    while (_alive(child) or _alive(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in (child, grandchild) if _alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    assert not left, f"left running after the run ended: {left} (child {child}, setsid grandchild {grandchild})"


def _run_dir(out: Path) -> Path:
    (run_dir,) = [d for d in out.iterdir() if d.is_dir() and not d.is_symlink()]
    return run_dir


def test_sigterm_writes_the_partial_report_and_kills_the_tree(tmp_path):
    proc, out, pids = _start(tmp_path, "reference,HANG")
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, output[-3000:]
    run_dir = _run_dir(out)
    assert (run_dir / "index.html").is_file() and (run_dir / "junit.xml").is_file(), output[-3000:]
    assert (out / "latest").resolve() == run_dir.resolve()
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["interrupted"] is True
    states = {e["name"]: e["state"] for e in meta["engines"]}
    assert states == {"reference": "planned", "hang": "interrupted"}, states
    assert 'id="interrupted"' in (run_dir / "index.html").read_text()
    _assert_gone(pids)


def test_sigkill_of_the_run_kills_the_engine_and_its_setsid_grandchild(tmp_path):
    proc, out, pids = _start(tmp_path, "HANG")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    _assert_gone(pids)


def test_two_sigints_leave_a_whole_report_and_no_temp_files(tmp_path):
    proc, out, pids = _start(tmp_path, "HANG")
    proc.send_signal(signal.SIGINT)
    time.sleep(0.15)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.15)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output[-3000:]
    run_dir = _run_dir(out)
    html = (run_dir / "index.html").read_text()
    assert html.rstrip().endswith("</html>") and (run_dir / "junit.xml").is_file()
    stray = [p.name for p in list(run_dir.iterdir()) + list(out.iterdir()) if p.name.startswith(".")]
    assert not stray, f"temp files left: {stray}"
    _assert_gone(pids)
