"""Two stand-in engines that are not Python and that the framework never imports (examples/): a
bash planner through `plan.command` and a bash dry run through `plan.log`, each planned by
`conformance plan`, `conformance run` and `pytest suites/ --engines FILE` with no framework file
edited; a deliberately wrong figure in each fails a named check on every path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import paths
from conformance.run.rundir import load_report, resolve_run_dir

EXAMPLES = paths.REPO_ROOT / "examples"
SHELL, SHELL_WRONG = EXAMPLES / "shell-port" / "engine.yaml", EXAMPLES / "shell-port" / "engine-wrong-lookahead.yaml"
LOG, LOG_WRONG = EXAMPLES / "log-port" / "engine.yaml", EXAMPLES / "log-port" / "engine-draft-outside.yaml"
CONFORMANCE = [sys.executable, "-m", "conformance"]

# (sound file, defective file, case, the check the defect fails, words its message carries)
STAND_INS = [
    pytest.param(SHELL, SHELL_WRONG, "drafting-table-dflash", "budget.parity_with_vllm",
                 "budget.lookahead_tokens: vLLM 9, shell-port-wrong-lookahead 8", id="plan.command"),
    pytest.param(LOG, LOG_WRONG, "seed-draft-kv-c8", "memory.inside_bound",
                 "memory.outside_bound: draft_kv 1.25 GiB (1344798720 B) allocated beside the pool", id="plan.log"),
]


def _name(engine_file: Path) -> str:
    import yaml

    return yaml.safe_load(engine_file.read_text())["name"]


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, cwd=str(paths.REPO_ROOT), timeout=900, **kw)


@pytest.mark.parametrize("sound, wrong, case_id, check, words", STAND_INS)
def test_conformance_plan_plans_a_stand_in(sound, wrong, case_id, check, words):
    for f in (sound, wrong):
        out = _run(CONFORMANCE + ["plan", "--engine", str(f), "--case", case_id])
        assert out.returncode == 0, out.stderr
        obs = json.loads(out.stdout)
        assert obs["engine"]["name"] == _name(f) and obs["status"] == "ok"
        assert obs["budget"]["max_num_batched_tokens"] == {"drafting-table-dflash": 256, "seed-draft-kv-c8": 8192}[case_id]
    assert json.loads(_run(CONFORMANCE + ["plan", "--engine", str(sound), "--case", "drafting-table-dflash"]).stdout)[
        "budget"]["lookahead_tokens"] == 9


@pytest.mark.parametrize("sound, wrong, case_id, check, words", STAND_INS)
def test_conformance_run_judges_each_stand_in_in_its_own_column(sound, wrong, case_id, check, words, tmp_path):
    out = _run(CONFORMANCE + ["run", "--engines", f"{sound},{wrong}", "--cases", case_id, "--out", str(tmp_path)])
    assert out.returncode == 1, out.stdout + out.stderr     # checks failed: the job says so by its exit code
    report = load_report(resolve_run_dir(tmp_path / "latest"))
    assert [e.name for e in report.matrix_engines] == [_name(sound), _name(wrong)]
    html = (resolve_run_dir(tmp_path / "latest") / "index.html").read_text()
    assert _name(wrong) in html and check in html
    verdict = {(v.check, v.engine): v for v in report.verdicts}
    assert verdict[(check, _name(sound))].outcome == "pass", verdict[(check, _name(sound))]
    bad = verdict[(check, _name(wrong))]
    assert bad.outcome == "fail" and words in bad.message + "\n".join(bad.details), bad


@pytest.mark.parametrize("sound, wrong, case_id, check, words", STAND_INS)
def test_pytest_suites_judge_a_stand_in(sound, wrong, case_id, check, words, tmp_path):
    verdicts_file = tmp_path / "verdicts.jsonl"
    suite = check.split(".")[0]
    out = _run([sys.executable, "-m", "pytest", f"suites/{suite}", "--engines", f"{sound},{wrong}", "--cases", case_id,
                "-p", "no:cacheprovider", "-q", "--verdicts-out", str(verdicts_file)])
    assert out.returncode == 1, out.stdout[-3000:]
    got = {(d["check"], d["engine"]): d for d in map(json.loads, verdicts_file.read_text().splitlines())}
    assert got[(check, _name(sound))]["outcome"] == "pass"
    assert got[(check, _name(wrong))]["outcome"] == "fail"
    test_id = f"test_{suite}_checks[{check.split('.', 1)[1]}-{_name(wrong)}-{case_id}]"
    assert f"FAILED suites/{suite}/test_{suite}.py::{test_id}" in out.stdout, out.stdout[-3000:]
    assert words in out.stdout or words in got[(check, _name(wrong))]["message"] + "".join(
        got[(check, _name(wrong))]["details"])


def test_an_engine_under_test_without_goldens_is_never_told_to_record_its_numbers(tmp_path):
    out = _run([sys.executable, "-m", "pytest", "suites/budget", "--engines", str(SHELL), "--cases",
                "drafting-table-dflash", "-p", "no:cacheprovider", "-q", "-rs"])
    assert "snapshot-update" not in out.stdout and "no regression golden of shell-port" in out.stdout, out.stdout[-3000:]
