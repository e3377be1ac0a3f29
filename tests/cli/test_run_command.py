"""`conformance run` and `conformance report`, end to end with the real reference adapter."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from conformance import paths
from conformance.cli.main import main
from conformance.documents.observation import validate
from conformance.report.model import failed_run
from conformance.run.rundir import load_report
from conformance.run.selection import DEFAULT_SELECTION, select_cases


def test_default_selection_is_seed_and_drafting_table():
    expected = set()
    for f in sorted(paths.cases_dir().glob("*.yaml")):
        doc = yaml.safe_load(f.read_text())
        if "seed" in (doc.get("tags") or []) or doc["id"].startswith("drafting-table-"):
            expected.add(doc["id"])
    cases, described = select_cases(None)
    assert {c.id for c in cases} == expected and expected
    assert described.startswith("default") and "seed" in described
    assert DEFAULT_SELECTION.tags == ("seed",)


def test_unknown_case_glob_is_a_clear_error(tmp_path, capsys):
    assert main(["run", "--cases", "no-such-case-*", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no case matches no-such-case-*" in err and "Traceback" not in err


@pytest.fixture
def reference_run(tmp_path, monkeypatch):
    """One real run: the reference on one tiny case; vLLM asked for but skipped (no cached venv here)."""
    monkeypatch.setenv("DFLASH_CONFORMANCE_CACHE", str(tmp_path / "empty-cache"))
    out = tmp_path / "reports"
    rc = main(["run", "--engines", "reference,vllm", "--no-build", "--cases", "tiny-dflash-c4-k8", "--out", str(out)])
    return rc, out


def test_run_writes_the_run_directory(reference_run):
    rc, out = reference_run
    latest = out / "latest"
    run_dir = latest.resolve() if latest.is_symlink() else out / latest.read_text().strip()
    assert run_dir.parent == out.resolve() or run_dir.parent == out
    lines = (run_dir / "observations.jsonl").read_text().splitlines()
    assert len(lines) == 1
    obs = validate(json.loads(lines[0]), "observations.jsonl")
    assert (obs["engine"]["name"], obs["case_id"]) == ("reference", "tiny-dflash-c4-k8")
    meta = json.loads((run_dir / "run.json").read_text())
    states = {e["name"]: (e["state"], e["note"]) for e in meta["engines"]}
    assert states["reference"][0] == "planned"
    assert states["vllm"][0] == "skipped" and "--no-build" in states["vllm"][1]
    assert meta["finished_at"] and meta["interrupted"] is False
    report = load_report(run_dir)
    assert rc == (1 if failed_run(report) else 0)
    html = (run_dir / "index.html").read_text()
    assert html.count('class="cell ') == 1          # reference x one case; the skipped engine has no column
    suites = ET.parse(run_dir / "junit.xml").getroot()
    (suite,) = suites.findall("testsuite")
    assert suite.get("name") == "conformance.reference"
    assert int(suite.get("tests")) == 1 + len(report.verdicts)
    assert int(suite.get("failures")) == sum(v.failed for v in report.verdicts)


def test_report_rerenders_from_observations(reference_run, capsys):
    _, out = reference_run
    run_dir = (out / "latest").resolve()
    first = (run_dir / "index.html").read_text()
    (run_dir / "index.html").unlink()
    (run_dir / "junit.xml").unlink()
    assert main(["report", str(out / "latest")]) == 0
    again = (run_dir / "index.html").read_text()
    assert again.count('class="cell ') == first.count('class="cell ') == 1
    assert (run_dir / "junit.xml").is_file()
    with (run_dir / "observations.jsonl").open("a") as fh:   # a run killed while writing its last line
        fh.write('{"schema_version": "1", "case_')
    assert main(["report", str(run_dir)]) == 0
    obs_file = run_dir / "observations.jsonl"
    obs_file.write_text("not json\n" + obs_file.read_text())
    capsys.readouterr()
    assert main(["report", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert f"{obs_file}: line 1: not JSON" in err and "Traceback" not in err


def test_report_of_a_directory_without_observations(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "no observations file" in capsys.readouterr().err


def _lines(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip().endswith("}")]


@pytest.mark.oracle
def test_sigint_leaves_a_valid_partial_report(tmp_path):
    """Ctrl-C while vLLM plans: exit 130, every observation so far kept, the rest marked not run, and
    no adapter process left behind."""
    out = tmp_path / "reports"
    env = dict(os.environ, PYTHONPATH=str(paths.REPO_ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "conformance", "run", "--engines", "reference,vllm",
                             "--cases", "tiny-*", "seed-*", "--out", str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 240
    run_dir = None
    while time.monotonic() < deadline and proc.poll() is None:
        dirs = [d for d in out.glob("*") if d.is_dir()] if out.is_dir() else []
        if dirs:
            run_dir = dirs[0]
            if any(o["engine"]["name"] == "vllm" for o in _lines(run_dir / "observations.jsonl")):
                break
        time.sleep(0.2)
    assert proc.poll() is None, f"the run ended before it could be interrupted:\n{proc.communicate()[0][-3000:]}"
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, output[-3000:]
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["interrupted"] is True
    planned = _lines(run_dir / "observations.jsonl")
    for o in planned:
        validate(o, "observations.jsonl")
    report = load_report(run_dir)
    num_cells = len(report.cases) * len(report.matrix_engines)
    assert 0 < len(planned) < num_cells
    html = (run_dir / "index.html").read_text()
    assert 'id="interrupted"' in html
    assert html.count('class="cell outcome-not-run"') == num_cells - len({(o["case_id"], o["engine"]["name"]) for o in planned})
    assert (out / "latest").resolve() == run_dir.resolve()
    leftover = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(run_dir) in cmdline.read_bytes().decode(errors="replace"):
                leftover.append(cmdline.parent.name)
        except OSError:
            continue
    assert not leftover, f"adapter processes left running: {leftover}"
