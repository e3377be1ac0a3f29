"""The run directory stores and loads, and never judges: `conformance run` judges once and stores the verdicts
(verdicts.jsonl), loading the run reads them as they were judged, and `conformance report DIR` is the one
command that judges a run again (with the roles its run.json recorded)."""

from __future__ import annotations

import json

import pytest

from conformance.cli.main import main
from conformance.run.rundir import VERDICTS_FILE, NotJudgedError, load_report, resolve_run_dir


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("reports")
    assert main(["run", "--cases", "drafting-table-dflash", "--engines", "reference", "--out", str(out),
                 "--no-history"]) == 0
    return resolve_run_dir(out / "latest")


def _stored(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / VERDICTS_FILE).read_text().splitlines()]


def test_a_run_stores_its_verdicts_and_loading_reads_them(run_dir):
    stored = _stored(run_dir)
    assert stored and {d["engine"] for d in stored} == {"reference"}
    assert [v.to_json() for v in load_report(run_dir).verdicts] == stored


def test_loading_does_not_judge_again_and_report_does(run_dir, tmp_path, capsys):
    """A stored verdict edited by hand is what loading gives (nothing judged it again); `conformance report`
    judges the observations again and stores what they give."""
    stored = _stored(run_dir)
    edited = [dict(stored[0], outcome="fail", message="edited")] + stored[1:]
    (run_dir / VERDICTS_FILE).write_text("".join(json.dumps(d) + "\n" for d in edited))
    assert load_report(run_dir).verdicts[0].message == "edited"
    assert main(["report", str(run_dir)]) == 0
    assert _stored(run_dir) == stored


def test_a_run_directory_never_judged_says_how_to_judge_it(run_dir, capsys):
    (run_dir / VERDICTS_FILE).unlink()
    with pytest.raises(NotJudgedError, match=r"no verdicts.jsonl: the run was not judged .*`conformance report "):
        load_report(run_dir)
    assert main(["report", str(run_dir)]) == 0
    assert load_report(run_dir).verdicts


def test_report_judges_each_engine_by_the_role_its_run_recorded(run_dir, capsys):
    meta = json.loads((run_dir / "run.json").read_text())
    meta["engines"][0]["role"] = "oracle"       # as if the run had resolved the reference as an oracle
    (run_dir / "run.json").write_text(json.dumps(meta))
    assert main(["report", str(run_dir)]) == 0
    checks = {d["check"] for d in _stored(run_dir)}
    assert "budget.parity_with_vllm" not in checks and "budget.golden" in checks   # oracle rows only
