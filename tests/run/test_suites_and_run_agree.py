"""`pytest suites/` and `conformance run` judge from one table: on the default matrix (the seed cases
and the drafting table, on every shipped engine) they produce the same set of (check, engine, case,
outcome)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conformance import paths
from conformance.run.rundir import load_report, resolve_run_dir
from conformance.run.selection import DEFAULT_SELECTION


@pytest.mark.oracle
@pytest.mark.slow
def test_suites_and_the_job_produce_the_same_verdicts(tmp_path):
    run = subprocess.run([sys.executable, "-m", "conformance", "run", "--out", str(tmp_path / "reports")],
                         capture_output=True, text=True, cwd=str(paths.REPO_ROOT), timeout=1200)
    assert run.returncode in (0, 1), run.stdout[-3000:] + run.stderr[-3000:]
    report = load_report(resolve_run_dir(tmp_path / "reports" / "latest"))
    from_job = {(v.check, v.engine, v.case_id, v.outcome) for v in report.verdicts}

    selection = ",".join([f"tag:{t}" for t in DEFAULT_SELECTION.tags] + list(DEFAULT_SELECTION.id_globs))
    out = tmp_path / "verdicts.jsonl"
    suites = subprocess.run([sys.executable, "-m", "pytest", "suites/budget", "suites/memory", "suites/trace",
                             "--cases", selection, "-p", "no:cacheprovider", "-q", "--verdicts-out", str(out)],
                            capture_output=True, text=True, cwd=str(paths.REPO_ROOT), timeout=1200)
    assert suites.returncode in (0, 1), suites.stdout[-3000:]
    from_suites = {(d["check"], d["engine"], d["case_id"], d["outcome"]) for d in map(json.loads, out.read_text().splitlines())}

    assert len(from_job) > 100, "the default matrix judges every engine on every case"
    assert {e for _, e, _, _ in from_job} == {"reference", "vllm", "sglang"}
    assert from_suites == from_job, (f"only in the suites: {sorted(from_suites - from_job)[:10]}; "
                                     f"only in the job: {sorted(from_job - from_suites)[:10]}")
