"""Real runs of the default CPU matrix, sharded and whole, shared by the nightly tests of a module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conformance import paths
from conformance.run.rundir import resolve_run_dir

# the reference and the seed-bug port: no oracle venv needed, and failing checks among the verdicts
ENGINES = f"reference,{paths.REPO_ROOT / 'examples' / 'defective-port' / 'engine-seed-bugs.yaml'}"


def conformance_run(out: Path, *args: str, expect_rc: int = 1) -> Path:
    """`conformance run` of the default matrix (plus `args`) in its own process; its run directory."""
    run = subprocess.run([sys.executable, "-m", "conformance", "run", "--engines", ENGINES, "--out", str(out), *args],
                         capture_output=True, text=True, cwd=str(paths.REPO_ROOT), timeout=900)
    assert run.returncode == expect_rc, run.stdout[-3000:] + run.stderr[-3000:]   # the port fails checks: 1
    return resolve_run_dir(out / "latest")


@pytest.fixture(scope="session")
def sharded_runs(tmp_path_factory) -> dict[str, Path]:
    """The default matrix as shard 1/2, shard 2/2 (two directories) and unsharded."""
    root = tmp_path_factory.mktemp("nightly-runs")
    return {"1/2": conformance_run(root / "shard-1", "--shard", "1/2"),
            "2/2": conformance_run(root / "shard-2", "--shard", "2/2"),
            "all": conformance_run(root / "all")}
