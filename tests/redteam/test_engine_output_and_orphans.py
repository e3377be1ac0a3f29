"""Issue 28 items 6 and 7 on the plan path, through the real `conformance plan`:

- item 7: a daemon that a plan command or a version command detaches with `setsid -f` (re-parented
  away from the command at once, before any poll sees it) does not outlive the run;
- item 6: a plan.log regex against a 200,000-digit line finishes within seconds (lines are cut, the
  regexes time-bounded); a 100 MB stderr flood leaves a log of at most the cap and a note in the
  observation, read while the child runs; a version command that prints 50 MB and hangs is read
  through a cap and stopped at the engine's own timeout, not 60 s.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from conformance.harness import plan_command

from ._cli import cli

CASE = "tiny-dflash-c4-k8"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone(pid_file: Path, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + 30
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    pid = int(pid_file.read_text().split()[0])
    deadline = time.monotonic() + within_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
        raise AssertionError(f"the daemon {pid} ({pid_file.name}) outlived the run")


def _daemon(pid_file: Path) -> str:
    """A shell line that detaches a sleeping daemon with setsid -f, then waits until the daemon wrote its pid."""
    return (f"setsid -f sh -c 'echo $$ > {pid_file}; exec sleep 300' </dev/null >/dev/null 2>&1; "
            f"while [ ! -s {pid_file} ]; do sleep 0.05; done")


def _engine(tmp_path: Path, plan: dict, **top) -> Path:
    doc = {"name": "careless", "role": "under-test", **top, "plan": plan}
    doc.setdefault("version", "1") if "version_command" not in top else None
    path = tmp_path / "careless.yaml"
    path.write_text(json.dumps(doc))
    return path


def test_a_daemon_a_plan_command_detaches_is_killed(tmp_path):
    pid_file = tmp_path / "plan-daemon.pid"
    engine = _engine(tmp_path, {"command": {"argv": ["sh", "-c", _daemon(pid_file) + "; sleep 0.5; exit 1"],
                                            "timeout_s": 30}})
    ran = cli(["plan", "--engine", str(engine), "--case", CASE, "--log-dir", str(tmp_path / "logs")], tmp_path)
    assert "Traceback" not in ran.err, ran.err[-3000:]
    _gone(pid_file)


def test_a_daemon_a_version_command_detaches_is_killed(tmp_path):
    pid_file = tmp_path / "version-daemon.pid"
    engine = _engine(tmp_path, {"command": {"argv": ["sh", "-c", "exit 1"], "timeout_s": 30}},
                     version_command=["sh", "-c", _daemon(pid_file) + "; echo 9.9"])
    ran = cli(["plan", "--engine", str(engine), "--case", CASE, "--log-dir", str(tmp_path / "logs")], tmp_path)
    assert "Traceback" not in ran.err, ran.err[-3000:]
    assert '"version": "9.9"' in ran.out, ran.out[-2000:]
    _gone(pid_file)


def test_a_regex_against_a_200k_digit_line_is_bounded(tmp_path):
    engine = _engine(tmp_path, {"log": {"argv": [sys.executable, "-c", "print('1' * 200_000); print('max_num_seqs=4')"],
                                        "timeout_s": 5,
                                        "fields": {"budget.max_num_seqs": r"(\d+) running",
                                                   "budget.max_active_seqs": r"max_num_seqs=(\d+)"}}})
    ran = cli(["plan", "--engine", str(engine), "--case", CASE, "--log-dir", str(tmp_path / "logs")], tmp_path,
              timeout_s=40)
    assert ran.wall_s < 30, f"the regexes ran {ran.wall_s:.0f} s on one line"
    assert "Traceback" not in ran.err, ran.err[-3000:]
    obs = json.loads(ran.out)
    assert obs["budget"]["max_active_seqs"] == 4, obs.get("message")
    assert "were cut to 4096" in json.dumps(obs["provenance"]["glue"]), obs["provenance"]["glue"]


def test_a_stderr_flood_is_capped_while_the_child_runs(tmp_path):
    logs = tmp_path / "logs"
    flood = "head -c 100000000 /dev/zero | tr '\\0' x 1>&2; exit 1"
    engine = _engine(tmp_path, {"command": {"argv": ["sh", "-c", flood], "timeout_s": 60}})
    ran = cli(["plan", "--engine", str(engine), "--case", CASE, "--log-dir", str(logs)], tmp_path, timeout_s=90)
    assert "Traceback" not in ran.err, ran.err[-3000:]
    sizes = {p.name: p.stat().st_size for p in logs.rglob("*") if p.is_file()}
    assert max(sizes.values()) <= getattr(plan_command, "MAX_LOG_BYTES", 8 << 20) + 4096, sizes
    obs = json.loads(ran.out)
    assert obs["status"] == "error" and "bytes past the 8 MiB cap were discarded" in obs["message"], obs["message"][-500:]
    assert ran.peak_mib < 400, f"peak RSS {ran.peak_mib:.0f} MiB"


def test_a_version_command_is_capped_and_bounded_by_the_engines_timeout(tmp_path):
    engine = _engine(tmp_path, {"command": {"argv": ["sh", "-c", "exit 1"], "timeout_s": 3}},
                     version_command=["sh", "-c", "head -c 50000000 /dev/zero; sleep 100"])
    ran = cli(["plan", "--engine", str(engine), "--case", CASE, "--log-dir", str(tmp_path / "logs")], tmp_path,
              timeout_s=50)
    assert ran.wall_s < 30, f"the version command ran {ran.wall_s:.0f} s past the engine's 3 s timeout"
    assert "did not finish within the engine's 3 s" in ran.out, ran.out[-1000:]
    # the same CLI with a version command of a few bytes: reading the 50 MB whole would add about that much
    (tmp_path / "quiet").mkdir()
    quiet = _engine(tmp_path / "quiet", {"command": {"argv": ["sh", "-c", "exit 1"], "timeout_s": 3}},
                    version_command=["sh", "-c", "echo 1.0"])
    base = cli(["plan", "--engine", str(quiet), "--case", CASE, "--log-dir", str(tmp_path / "logs-quiet")], tmp_path,
               timeout_s=50)
    assert ran.peak_mib < base.peak_mib + 30, f"peak RSS {ran.peak_mib:.0f} MiB against {base.peak_mib:.0f} MiB"


def test_a_backtracking_regex_is_stopped_at_the_time_budget(tmp_path):
    engine = _engine(tmp_path, {"log": {"argv": [sys.executable, "-c", "print('x' * 3000)"], "timeout_s": 5,
                                        "fields": {"budget.max_num_seqs": r"((x+x+)+)y"}}})
    ran = cli(["plan", "--engine", str(engine), "--case", CASE, "--log-dir", str(tmp_path / "logs")], tmp_path,
              timeout_s=40)
    assert ran.wall_s < 30, f"the regex ran {ran.wall_s:.0f} s"
    obs = json.loads(ran.out[:ran.out.rindex("}") + 1])
    assert obs["status"] == "error", obs
    assert "plan.log.fields.budget.max_num_seqs" in obs["message"] and "did not finish within the 5 s" in obs["message"], \
        obs["message"]
