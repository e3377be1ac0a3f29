"""The reference docs are generated from the code (`conformance docs`): the committed ones must be what
the code generates now (the check tables of README.md and suites/*/README.md among them), every
placeholder and every observation field carries a meaning, every field a check reads is in the observation
schema, and every row of the check table says when it fails and is described in its suite's README."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conformance import paths
from conformance.checks.check_table import CHECKS, LIVE_CHECKS
from conformance.checks.engine_lint import schema_node
from conformance.checks.row import UNDER_TEST, CheckSpec
from conformance.cli.docs_gen import CHECKS_BEGIN, CHECKS_END, check_table_md, documents
from conformance.engines.engine_file import PLAN_PLACEHOLDERS
from conformance.engines.manifest import PLACEHOLDERS


def test_the_committed_docs_are_what_the_code_generates():
    for rel, text in documents().items():
        committed = (paths.REPO_ROOT / rel).read_text()
        assert committed == text, f"{rel} is stale: run `python -m conformance docs` and commit it"


def test_docs_check_exits_1_naming_a_stale_doc(tmp_path):
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(paths.REPO_ROOT / "conformance", repo / "conformance", ignore=shutil.ignore_patterns("__pycache__"))
    for rel, text in documents().items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    (repo / "docs/observation.md").write_text("old\n")
    out = subprocess.run([sys.executable, "-m", "conformance", "docs", "--check"], capture_output=True, text=True,
                         cwd=str(repo), env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert out.returncode == 1 and "docs/observation.md: stale" in out.stdout, out.stdout + out.stderr
    assert "docs/placeholders.md: up to date" in out.stdout


def test_every_placeholder_and_field_has_its_meaning_and_every_read_field_exists():
    text = documents()
    for name in list(PLACEHOLDERS) + list(PLAN_PLACEHOLDERS):
        assert f"| `{{{name}}}` | " in text["docs/placeholders.md"]
    for workload in ("num_requests", "prompt_tokens", "output_tokens", "accepted_tokens", "async_scheduling"):
        assert workload in PLAN_PLACEHOLDERS
    rows = [line for line in text["docs/observation.md"].splitlines() if line.startswith("| `")]
    assert rows and all(line.split("|")[4].strip() for line in rows), [r for r in rows if not r.split("|")[4].strip()]
    for check in CHECKS + LIVE_CHECKS:
        assert check.reads, check.name
        for path in check.reads:
            assert schema_node(path)[0] is not None, (check.name, path)
            assert f"`{check.name}`" in next(r for r in rows if r.startswith(f"| `{path}` |"))


def test_a_row_without_its_prose_is_refused_naming_it():
    row = CheckSpec("budget.new_rule", "budget", (UNDER_TEST,), CHECKS[1].run, reads=("status",))
    with pytest.raises(ValueError, match="budget.new_rule says nothing of when it fails"):
        check_table_md(CHECKS + (row,))


def test_a_new_row_makes_the_committed_tables_stale(monkeypatch):
    from conformance.checks import check_table

    row = CheckSpec("budget.new_rule", "budget", (UNDER_TEST,), CHECKS[1].run, "it is new", reads=("status",))
    monkeypatch.setattr(check_table, "CHECKS", CHECKS + (row,))
    stale = {rel for rel, text in documents().items() if (paths.REPO_ROOT / rel).read_text() != text}
    assert {"README.md", "suites/budget/README.md"} <= stale, stale


def test_every_row_is_described_in_its_suite_readme_beside_the_generated_table():
    for check in CHECKS + LIVE_CHECKS:
        text = (paths.REPO_ROOT / "suites" / check.suite / "README.md").read_text()
        prose = text[:text.index(CHECKS_BEGIN)] + text[text.index(CHECKS_END):]
        assert f"`{check.name}`" in prose, f"suites/{check.suite}/README.md does not describe {check.name}"
