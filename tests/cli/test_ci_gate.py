"""What a team gates its CI with, through `conformance run` on the stand-in port with the three seed bugs:
its shipped expectations file (exit 0), a fixed bug (an unexpected pass: exit 1), a failure no entry
names (exit 1), an engine that errors (exit 3), bad input (exit 2), reports under the working directory
and an engine under test's goldens in the team's own directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conformance import paths
from conformance.cli.main import main
from conformance.run import exit_status
from conformance.run.rundir import load_report, resolve_run_dir

PORT_DIR = paths.REPO_ROOT / "examples" / "defective-port"
SEED_BUGS = PORT_DIR / "engine-seed-bugs.yaml"
EXPECTATIONS = PORT_DIR / "expectations-seed-bugs.yaml"
SEED_CASES = ["seed-*"]


@pytest.fixture(autouse=True)
def _wide_console(monkeypatch):
    monkeypatch.setenv("COLUMNS", "500")   # rich wraps at the terminal's width; keep a summary line one line


def _port_variant(tmp: Path, defects: list[str], name: str = "port-seed-bugs") -> Path:
    """The seed-bug port's engine file, same name, with only `defects` switched on (a team's fix)."""
    doc = yaml.safe_load(SEED_BUGS.read_text())
    doc["defects"] = defects
    doc["name"] = name
    doc["plan"]["command"]["argv"] = [a.replace("{engine_dir}", str(PORT_DIR)) for a in doc["plan"]["command"]["argv"]]
    f = tmp / f"{name}-{'-'.join(defects) or 'sound'}.yaml"
    f.write_text(yaml.safe_dump(doc, sort_keys=False))
    return f


def _run(tmp: Path, engines: str, *extra: str, cases=SEED_CASES) -> tuple[int, Path]:
    out = tmp / "reports"
    rc = main(["run", "--engines", engines, "--cases", *cases, "--out", str(out), *extra])
    return rc, resolve_run_dir(out / "latest")


def test_shipped_expectations_make_the_seed_port_pass_the_gate(tmp_path, capsys):
    rc_plain, _ = _run(tmp_path / "plain", str(SEED_BUGS))
    capsys.readouterr()
    rc, run_dir = _run(tmp_path / "gated", str(SEED_BUGS), "--expectations", str(EXPECTATIONS))
    out = capsys.readouterr().out
    assert rc_plain == exit_status.CHECK_FAILED
    assert rc == exit_status.PASSED, out[-3000:]
    report = load_report(run_dir)
    failed = [v for v in report.verdicts if v.failed]
    assert failed and len(report.expectations) == 15       # the failures are still failures, each one known
    assert "new failures: 0" in out and "unexpected passes: 0" in out
    assert f"expected failures: {len(failed)}" in out
    assert out.count("XFAIL port-seed-bugs") == len(failed)
    assert "XFAIL port-seed-bugs seed-draft-kv-c8 memory.inside_bound: draft KV (9.43 GiB) is allocated" in out
    meta = json.loads((run_dir / "run.json").read_text())
    assert [e["check"] for e in meta["expectations"]][:2] == ["memory.inside_bound", "memory.draft_kv_scaling"]
    html = (run_dir / "index.html").read_text()
    assert 'id="expectations"' in html and "SEED-1" in html


def test_a_fixed_bug_is_reported_as_an_unexpected_pass(tmp_path, capsys):
    fixed = _port_variant(tmp_path, ["two-pools", "no-drafting-reservation"])   # draft KV now inside the bound
    rc, run_dir = _run(tmp_path, str(fixed), "--expectations", str(EXPECTATIONS))
    out = capsys.readouterr().out
    assert rc == exit_status.CHECK_FAILED, out[-3000:]
    assert "XPASS port-seed-bugs seed-draft-kv-c8 memory.inside_bound: expected to fail: draft KV" in out
    assert "expectations-seed-bugs.yaml: expectations[0]); now passes: remove the entry" in out
    assert "new failures: 0" in out
    report = load_report(run_dir)
    bound = {v.case_id: v.outcome for v in report.verdicts if v.check == "memory.inside_bound"}
    assert bound == {"seed-draft-kv-c8": "pass", "seed-draft-kv-c32": "pass", "seed-drafting-reservation-pard": "pass",
                     "seed-unified-pool-c32-k8": "skip", "seed-unified-pool-c32-k8-small": "skip"}   # refused: skip
    html = (run_dir / "index.html").read_text()
    assert 'id="unexpected-passes">Unexpected passes: 7<' in html and "unexpected-pass" in html


def test_a_failure_no_entry_names_is_a_new_failure(tmp_path, capsys):
    doc = yaml.safe_load(EXPECTATIONS.read_text())
    doc["expectations"] = [e for e in doc["expectations"] if e["check"] != "memory.draft_kv_scaling"]
    partial = tmp_path / "partial.yaml"
    partial.write_text(yaml.safe_dump(doc))
    rc, _ = _run(tmp_path, str(SEED_BUGS), "--expectations", str(partial))
    out = capsys.readouterr().out
    assert rc == exit_status.CHECK_FAILED
    assert "new failures: 1 " in out
    assert "FAIL port-seed-bugs seed-draft-kv-c8 memory.draft_kv_scaling: draft KV does not scale" in out


def test_an_engine_that_errors_exits_3_even_beside_failures(tmp_path, capsys):
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump({
        "name": "broken-port", "role": "under-test", "version": "0.0.1",
        "plan": {"command": {"argv": ["{python}", "-c", "print('this is not an observation')"], "timeout_s": 30}}}))
    rc, run_dir = _run(tmp_path, f"{broken},{SEED_BUGS}", "--expectations", str(EXPECTATIONS),
                       cases=["seed-draft-kv-c8"])
    out = capsys.readouterr().out
    assert rc == exit_status.ENGINE_ERROR, out[-3000:]
    assert "ERROR broken-port seed-draft-kv-c8" in out
    assert exit_status.engine_errored(load_report(run_dir))


@pytest.mark.parametrize("doc, wanted", [
    ({"expectations": [{"check": "memory.insde_bound", "reason": "r", "link": "PORT-1"}]},
     "expectations[0].check: 'memory.insde_bound' names no check (known: budget.golden"),
    ({"expectations": [{"check": "memory.inside_bound", "reason": " ", "link": "PORT-1"}]},
     "expectations[0].reason: a reason must say why"),
    ({"expectations": [{"check": "memory.inside_bound", "reason": "r", "link": "see the wiki"}]},
     "expectations[0].link: 'see the wiki' is not a link"),
    ({"expectations": [{"check": "memory.inside_bound", "reason": "r"}]},
     "expectations[0]: 'link' is a required property"),
    ({"engine": "p", "known": []}, "(root): unknown field(s) ('known' was unexpected)"),
    ([1, 2], "(root): an expectations file is a YAML mapping"),
])
def test_a_bad_expectations_file_exits_2_naming_file_and_path(tmp_path, capsys, doc, wanted):
    f = tmp_path / "exp.yaml"
    f.write_text(yaml.safe_dump(doc))
    rc = main(["run", "--engines", str(SEED_BUGS), "--cases", "seed-draft-kv-c8", "--out", str(tmp_path / "r"),
               "--expectations", str(f)])
    err = capsys.readouterr().err
    assert rc == exit_status.BAD_INPUT
    assert f"{f}: {wanted}" in err, err
    assert "Traceback" not in err and not (tmp_path / "r").exists()   # nothing planned, nothing written


def test_reports_go_under_the_working_directory_not_the_framework(tmp_path):
    team = tmp_path / "team-repo"
    team.mkdir()
    framework_reports = paths.REPO_ROOT / "reports"
    before = sorted(framework_reports.iterdir()) if framework_reports.is_dir() else []
    run = subprocess.run([sys.executable, "-m", "conformance", "run", "--engines", str(SEED_BUGS), "--cases",
                          "seed-draft-kv-c8", "--expectations", str(EXPECTATIONS)],
                         cwd=team, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(paths.REPO_ROOT)})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert (resolve_run_dir(team / "reports" / "latest") / "index.html").is_file()
    after = sorted(framework_reports.iterdir()) if framework_reports.is_dir() else []
    assert after == before


def test_goldens_of_an_engine_under_test_live_in_the_teams_directory(tmp_path):
    """Recorded with pytest --snapshot-update --goldens-dir, read back by conformance run --goldens-dir; the
    oracles' goldens stay the framework's (vLLM's still judge the port)."""
    sound = _port_variant(tmp_path, [], name="team-port")
    team_goldens = tmp_path / "team" / "goldens"
    framework_goldens = sorted(str(p) for p in paths.goldens_dir().rglob("*.json"))
    rec = subprocess.run([sys.executable, "-m", "pytest", "suites/memory", "-p", "no:randomly", "-p", "no:cacheprovider",
                          "-q", "--engines", str(sound), "--cases", "tiny-dflash-c4-k8", "--goldens-dir",
                          str(team_goldens), "--snapshot-update", "-k", "golden"],
                         cwd=paths.REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert rec.returncode == 0, rec.stdout[-3000:]
    recorded = sorted(team_goldens.rglob("*.json"))
    assert [p.relative_to(team_goldens).as_posix() for p in recorded] == [
        "memory/test_memory/test_memory_golden[team-port-tiny-dflash-c4-k8].json"]
    assert sorted(str(p) for p in paths.goldens_dir().rglob("*.json")) == framework_goldens

    rc, run_dir = _run(tmp_path / "a", str(sound), "--goldens-dir", str(team_goldens), cases=["tiny-dflash-c4-k8"])
    verdicts = {v.check: v for v in load_report(run_dir).verdicts}
    assert rc == 0 and verdicts["memory.golden"].outcome == "pass"
    assert verdicts["budget.golden"].outcome == "skip"      # recorded only memory: the others are absent there
    assert verdicts["memory.seats_equal_vllm"].outcome == "pass"
    assert "vllm 0.33.0 goldens" in verdicts["memory.seats_equal_vllm"].message + verdicts["budget.parity_with_vllm"].message

    doc = json.loads(recorded[0].read_text())
    doc["memory"]["max_concurrency"] += 1          # the team's golden no longer matches: a regression
    recorded[0].write_text(json.dumps(doc))
    rc, run_dir = _run(tmp_path / "b", str(sound), "--goldens-dir", str(team_goldens), cases=["tiny-dflash-c4-k8"])
    verdicts = {v.check: v for v in load_report(run_dir).verdicts}
    assert rc == 1 and verdicts["memory.golden"].failed
    assert "max_concurrency" in verdicts["memory.golden"].message + " ".join(verdicts["memory.golden"].details)
