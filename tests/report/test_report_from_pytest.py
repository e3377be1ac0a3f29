"""`pytest --parity-report DIR`: the plugin's session report, from a real pytest run on the reference."""

from __future__ import annotations

import subprocess
import sys

from conformance import paths
from conformance.report.from_pytest import build_pytest_report

SUITE = '''
def test_status_known(engine, case, observation):
    assert observation["status"] in ("ok", "refused")


def test_fails_on_purpose(engine, case, observation):
    assert observation["budget"]["max_num_seqs"] == -1, "deliberately failing check"
'''


def test_parity_report_of_a_pytest_session(tmp_path, dom):
    suite = tmp_path / "mysuite"
    suite.mkdir()
    (suite / "test_mine.py").write_text(SUITE)
    out = tmp_path / "report"
    run = subprocess.run([sys.executable, "-m", "pytest", str(suite), "-q", "-p", "no:cacheprovider",
                          "--rootdir", str(tmp_path), "--engines", "reference", "--cases", "tiny-dflash-c4-k8",
                          "--parity-report", str(out)], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(paths.REPO_ROOT), "PATH": "/usr/bin:/bin",
                              "HOME": str(tmp_path)}, timeout=300)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]   # the deliberate failure
    assert "parity report:" in run.stdout
    page = dom((out / "index.html").read_text())
    (cell,) = page.find_all("td", cls="cell")
    assert (cell.attrs["data-case"], cell.attrs["data-engine"], cell.attrs["data-outcome"]) == (
        "tiny-dflash-c4-k8", "reference", "fail")
    rows = {r.attrs["data-check"]: r for r in page.find_all("tr", cls="verdict")}
    assert set(rows) == {"mysuite.test_status_known", "mysuite.test_fails_on_purpose"}
    assert rows["mysuite.test_status_known"].attrs["data-outcome"] == "pass"
    assert rows["mysuite.test_fails_on_purpose"].attrs["data-outcome"] == "fail"
    assert "deliberately failing check" in rows["mysuite.test_fails_on_purpose"].text()
    assert len((out / "observations.jsonl").read_text().splitlines()) == 1


def test_results_without_engine_are_left_out(obs_factory):
    o = obs_factory("reference", "case-a")
    report = build_pytest_report([
        {"nodeid": "suites/budget/test_budget.py::test_x[reference-case-a]", "outcome": "skipped",
         "engine": "reference", "case_id": "case-a", "observation": o, "message": ""},
        {"nodeid": "tests/test_other.py::test_y", "outcome": "failed", "engine": None, "case_id": None,
         "observation": None, "message": "boom"},
    ])
    assert [(v.check, v.outcome) for v in report.verdicts] == [("budget.test_x", "skip")]
    assert [e.name for e in report.engines] == ["reference"]
