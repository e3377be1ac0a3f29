"""benchmarks/gpu_live.sh same-runs / wait: several same-run ladders as one background job, each in its own
folder, and `wait` naming each run's status.

Run on a CPU with the exactly paced stub engines and their CPU case (tests/fixtures/live) in place of the
GPU case and vLLM (LIVE_CASE, SAME_RUN_ENGINES): the step's own work (the job, the folders, what each keeps,
what `wait` prints) is the same; the runs then feed `live_tables.py --across-runs`, the run as the unit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conformance.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "gpu_live.sh"
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "live"
KEPT = ("observations.jsonl", "verdicts.jsonl", "index.html", "junit.xml", "run.json", "run.log", "rc")


def _run(steps: list[str], tmp: Path, **env: str) -> subprocess.CompletedProcess:
    scratch = tmp / "scratch"
    full = dict(os.environ, GPU_OUT=str(scratch / "gpu-out"), GOLDENS=str(scratch / "goldens"), STASH=str(tmp / "stash"),
                PACK=str(tmp / "no-pack"), SPACK=str(tmp / "no-spack"), PIDS=str(tmp), REPORTS_SAME=str(scratch / "reports"),
                PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", **env)   # python3: this interpreter
    return subprocess.run(["bash", str(SCRIPT), str(tmp / "results"), *steps], capture_output=True, text=True,
                          env=full, cwd=REPO_ROOT, timeout=300)


def _same_runs(tmp_path, n: int) -> str:
    """SAME_RUNS=n on the stub case, then `wait`: what `wait` printed."""
    engines = f"{FIXTURES / 'stub-paced.yaml'},{FIXTURES / 'stub-slow.yaml'}"
    started = _run(["same-runs"], tmp_path, SAME_RUNS=str(n), LIVE_CASE=str(FIXTURES / "live-stub-cpu.yaml"),
                   SAME_RUN_ENGINES=engines)
    assert started.returncode == 0, started.stdout + started.stderr
    assert f"started same-runs ({n}), pid" in started.stdout
    waited = _run(["wait"], tmp_path, WAIT_S="240")
    assert waited.returncode == 0 and "\ndone\n" in waited.stdout, waited.stdout + waited.stderr
    return waited.stdout


def test_same_runs_keeps_each_run_in_its_folder_and_wait_names_each(tmp_path):
    _same_runs(tmp_path, 2)
    waited = _same_runs(tmp_path, 1)          # a second same-runs numbers on: the first's runs stay

    out = tmp_path / "scratch" / "gpu-out"
    runs = sorted(p.name for p in out.glob("same-run*"))
    assert runs == ["same-run-1", "same-run-2", "same-run-3"], runs
    ids = set()
    for k in (1, 2, 3):
        folder = out / f"same-run-{k}"
        assert all((folder / name).is_file() for name in KEPT), sorted(p.name for p in folder.iterdir())
        assert (folder / "rc").read_text().strip() == "0", (folder / "run.log").read_text()[-3000:]
        assert (folder / "logs").is_dir()
        assert f"--- {folder} (rc 0): pass: 2 · fail: 0" in waited, waited
        ids.add(json.loads((folder / "run.json").read_text())["run_id"])
        served = {json.loads(line)["engine"]["name"] for line in (folder / "observations.jsonl").read_text().splitlines()}
        assert served == {"stub-paced", "stub-slow"}
    assert len(ids) == 3                      # three runs, none copied from another

    table = subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "live_tables.py"), "--across-runs",
                            "--oracle", "stub-paced", *(str(out / f"same-run-{k}") for k in (1, 2, 3))],
                           capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert table.returncode == 0, table.stderr
    rows = [r for r in table.stdout.splitlines() if r.startswith("| stub-slow |")]
    assert rows and all(r.split(" | ")[2] == "3" for r in rows), table.stdout     # three runs, each one sample


def test_wait_with_no_background_job_says_done_and_names_no_run(tmp_path):
    waited = _run(["wait"], tmp_path, WAIT_S="5")
    assert waited.returncode == 0 and "\ndone\n" in waited.stdout, waited.stdout + waited.stderr
    assert "same-run" not in waited.stdout
