"""`pytest suites/live` and `conformance run --live` judge from one table (check_table.LIVE_CHECKS) and
serve through one function (live.measure): on the shipped CPU live case, with the reference and a
stub engine, they produce the same set of (check, engine, case, outcome); vLLM, asked for too, serves
the CPU case in neither (an oracle serves only cases on a GPU) and needs no executable for it."""

from __future__ import annotations

import json
import subprocess
import sys

from conformance import paths
from conformance.job.rundir import load_report, resolve_run_dir

ENGINES = "vllm,reference,tests/fixtures/live/stub-paced.yaml"   # vLLM serves no CPU case in either face


def test_the_live_suite_and_the_live_job_produce_the_same_verdicts(tmp_path):
    run = subprocess.run([sys.executable, "-m", "conformance", "run", "--live", "--cases", "live-tiny-dflash-cpu",
                          "--engines", ENGINES, "--out", str(tmp_path / "reports")],
                         capture_output=True, text=True, cwd=str(paths.REPO_ROOT), timeout=600)
    assert run.returncode in (0, 1), run.stdout[-3000:] + run.stderr[-3000:]
    report = load_report(resolve_run_dir(tmp_path / "reports" / "latest"))
    from_job = {(v.check, v.engine, v.case_id, v.outcome) for v in report.verdicts}

    out = tmp_path / "verdicts.jsonl"
    suites = subprocess.run([sys.executable, "-m", "pytest", "suites/live", "--engines", ENGINES,
                             "--cases", "live-tiny-dflash-cpu", "-p", "no:cacheprovider", "-p", "no:randomly", "-q",
                             "--verdicts-out", str(out)],
                            capture_output=True, text=True, cwd=str(paths.REPO_ROOT), timeout=600)
    assert suites.returncode in (0, 1), suites.stdout[-3000:]
    from_suites = {(d["check"], d["engine"], d["case_id"], d["outcome"])
                   for d in map(json.loads, out.read_text().splitlines())}

    assert {c for c, _, _, _ in from_job} == {"live.golden", "live.acceptance_equals_vllm", "live.throughput_parity_vllm",
                                             "live.plan_matches_run", "live.device_memory_within_bound",
                                             "live.concurrency_served"}
    assert {e for _, e, _, _ in from_job} == {"reference", "stub-paced"}
    assert from_suites == from_job, (f"only in the suites: {sorted(from_suites - from_job)}; "
                                     f"only in the job: {sorted(from_job - from_suites)}")
