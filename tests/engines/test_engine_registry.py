"""Engines by shipped name, by path and through the `dflash_conformance.engines` entry-point group, with
errors that name the file and the JSON path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conformance import paths

SHELL_PORT = paths.REPO_ROOT / "examples" / "shell-port" / "engine.yaml"


def _conformance(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True, text=True,
                          cwd=str(paths.REPO_ROOT), timeout=300, env=env)


def test_an_installed_package_registers_an_engine_through_the_entry_point_group(tmp_path):
    site = tmp_path / "site"
    (site / "acme_port").mkdir(parents=True)
    (site / "acme_port" / "__init__.py").write_text(
        f"def engine_file():\n    return {str(SHELL_PORT)!r}\n")
    dist = site / "acme_port-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-port\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[dflash_conformance.engines]\nacme = acme_port:engine_file\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(paths.REPO_ROOT)]))
    listed = _conformance("engines", env=env)
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    assert listed.returncode == 0 and rows["shell-port"][1:4] == ["under-test", "0.1.0", "command"], listed.stdout
    assert "shell-port" not in _conformance("engines").stdout   # only through the installed entry point
    planned = _conformance("plan", "--engine", "acme", "--case", "drafting-table-dflash", env=env)
    assert planned.returncode == 0, planned.stderr
    assert json.loads(planned.stdout)["engine"]["name"] == "shell-port"   # the file's name wins


def test_engines_lists_role_version_plan_kind_and_environment():
    out = _conformance("engines")
    assert out.returncode == 0
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines()[1:]}
    assert rows["vllm"][1] == "oracle" and rows["sglang"][1] == "oracle" and rows["reference"][1] == "under-test"
    assert rows["vllm"][2] == "0.33.0" and rows["vllm"][3] == "module"


def test_a_malformed_engine_file_names_the_file_and_the_json_path(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: port\nrole: judge\nplan: {command: {argv: []}}\n")
    out = _conformance("engines", "check", str(bad))
    assert out.returncode == 2
    assert f"{bad}: role: 'judge' is not one of ['oracle', 'under-test']" in out.stdout
    assert f"{bad}: plan.command.argv: [] should be non-empty" in out.stdout
    run = _conformance("plan", "--engine", str(bad), "--case", "drafting-table-dflash")
    assert run.returncode == 2 and "Traceback" not in run.stderr and str(bad) in run.stderr


def test_an_unknown_engine_says_what_is_known():
    out = _conformance("plan", "--engine", "nosuch", "--case", "drafting-table-dflash")
    assert out.returncode == 2 and "unknown engine 'nosuch' (known: reference, vllm, sglang" in out.stderr
    missing = _conformance("plan", "--engine", "./nowhere/port.yaml", "--case", "drafting-table-dflash")
    assert missing.returncode == 2 and "engine file ./nowhere/port.yaml does not exist" in missing.stderr


def test_an_unknown_placeholder_is_named_when_the_file_is_checked(tmp_path):
    bad = tmp_path / "typo.yaml"
    bad.write_text('name: port\nrole: under-test\nversion: "1"\nplan: {command: {argv: ["./plan", "{max_num_seq}"]}}\n')
    out = _conformance("engines", "check", str(bad))
    assert out.returncode == 2 and f"{bad}: plan.command.argv[1]: unknown placeholder {{max_num_seq}}" in out.stdout


def test_every_oracle_the_checks_compare_with_is_a_reserved_shipped_oracle():
    """The reserved names are data (the shipped engine files of role oracle); an oracle a check compares with
    that no shipped file of role oracle names could be taken by any engine file, and its goldens rewritten."""
    from conformance.checks.check_table import CHECKS, LIVE_CHECKS
    from conformance.engines.shipped import reserved_oracle_names

    compared = {c.against for c in CHECKS + LIVE_CHECKS if c.against}
    assert compared == {"vllm", "sglang"}
    assert compared <= reserved_oracle_names() == {"vllm", "sglang"}
