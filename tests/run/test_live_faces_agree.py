"""`pytest suites/live` and `conformance run --live` judge from one table (check_table.LIVE_CHECKS) and
serve through one function (live.measure): on the shipped CPU live case, with the reference and a
stub engine, they produce the same set of (check, engine, case, outcome), and their reports read the
live case from its own file; vLLM, asked for too, serves the CPU case in neither (an oracle serves only
cases on a GPU) and needs no executable for it."""

from __future__ import annotations

import json
import subprocess
import sys

from conformance import paths
from conformance.run.rundir import load_report, resolve_run_dir

ENGINES = "vllm,reference,tests/fixtures/live/stub-paced.yaml"   # vLLM serves no CPU case in either face


def _job_verdicts(out) -> set[tuple[str, str, str, str]]:
    run = subprocess.run([sys.executable, "-m", "conformance", "run", "--live", "--cases", "live-tiny-dflash-cpu",
                          "--engines", ENGINES, "--out", str(out / "reports")],
                         capture_output=True, text=True, cwd=str(paths.REPO_ROOT), timeout=600)
    assert run.returncode in (0, 1), run.stdout[-3000:] + run.stderr[-3000:]
    report = load_report(resolve_run_dir(out / "reports" / "latest"))
    return {(v.check, v.engine, v.case_id, v.outcome) for v in report.verdicts}


def _suite_verdicts(out) -> set[tuple[str, str, str, str]]:
    path = out / "verdicts.jsonl"
    suites = subprocess.run([sys.executable, "-m", "pytest", "suites/live", "--engines", ENGINES,
                             "--cases", "live-tiny-dflash-cpu", "-p", "no:cacheprovider", "-p", "no:randomly", "-q",
                             "--verdicts-out", str(path), "--parity-report", str(out / "report")],
                            capture_output=True, text=True, cwd=str(paths.REPO_ROOT), timeout=600)
    assert suites.returncode in (0, 1), suites.stdout[-3000:]
    return {(d["check"], d["engine"], d["case_id"], d["outcome"]) for d in map(json.loads, path.read_text().splitlines())}


def test_the_live_suite_and_the_live_job_produce_the_same_verdicts(tmp_path):
    """Each face serves the engines itself, so a verdict that depends on what a loaded host let happen
    (two requests of a stub overlapping while the running-requests gauge is sampled) can come out
    otherwise in one of the two measurements: then both are measured again, as a user would, and the
    sets must agree within three attempts. Faces that judged differently would differ every time."""
    for attempt in range(3):
        from_job = _job_verdicts(tmp_path / f"job-{attempt}")
        from_suites = _suite_verdicts(tmp_path / f"suite-{attempt}")
        if from_suites == from_job:
            break
    assert {c for c, _, _, _ in from_job} == {"live.golden", "live.acceptance_equals_vllm", "live.throughput_parity_vllm",
                                             "live.plan_matches_run", "live.device_memory_within_bound",
                                             "live.concurrency_served", "live.running_not_below_sglang",
                                             "live.device_memory_within_sglang_bound"}
    assert {e for _, e, _, _ in from_job} == {"reference", "stub-paced"}
    assert from_suites == from_job, (f"only in the suites: {sorted(from_suites - from_job)}; "
                                     f"only in the job: {sorted(from_job - from_suites)}")
    # and both reports read the live case from its own file (suites/live/cases), not a bare stand-in
    description = "Live on a CPU: tiny hybrid and drafter served"
    job_page = (resolve_run_dir(tmp_path / f"job-{attempt}" / "reports" / "latest") / "index.html").read_text()
    suite_page = (tmp_path / f"suite-{attempt}" / "report" / "index.html").read_text()
    assert description in job_page
    assert description in suite_page, "the pytest face's report lost the live case's spec"
