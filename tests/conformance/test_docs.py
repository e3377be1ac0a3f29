"""The reference docs are generated from the code (`conformance docs`): the committed ones must be what
the code generates now, every placeholder and every observation field carries a meaning, and every field
a check reads is in the observation schema."""

from __future__ import annotations

import subprocess
import sys

from conformance import paths
from conformance.check_table import CHECKS, LIVE_CHECKS
from conformance.docs_gen import documents
from conformance.harness.engine_file import PLAN_PLACEHOLDERS
from conformance.harness.lint import schema_node
from conformance.harness.manifest import PLACEHOLDERS


def test_the_committed_docs_are_what_the_code_generates():
    for rel, text in documents().items():
        committed = (paths.REPO_ROOT / rel).read_text()
        assert committed == text, f"{rel} is stale: run `python -m conformance docs` and commit it"


def test_docs_check_exits_1_naming_a_stale_doc(tmp_path):
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(paths.REPO_ROOT / "conformance", repo / "conformance", ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "docs").mkdir()
    for rel, text in documents().items():
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
