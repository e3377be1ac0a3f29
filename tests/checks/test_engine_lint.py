"""`conformance engines check` as a linter of plan.log engine files (conformance.checks.engine_lint)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import yaml

from conformance import paths
from conformance.checks.engine_lint import lint
from conformance.engines.engine_file import load_engine_file

C_PORT = paths.REPO_ROOT / "examples" / "c-port"


def _check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance", "engines", "check", *args], capture_output=True,
                          text=True, cwd=str(paths.REPO_ROOT), timeout=600)


def _variant(tmp_path, fields=None, lists=None, drop=()) -> str:
    doc = yaml.safe_load((paths.REPO_ROOT / "examples/log-port/engine.yaml").read_text())
    doc["plan"]["log"]["argv"][0] = str(paths.REPO_ROOT / "examples/log-port/port.sh")
    doc["plan"]["log"]["fields"].update(fields or {})
    for dotted in drop:
        del doc["plan"]["log"]["fields"][dotted]
    if lists is not None:
        doc["plan"]["log"]["lists"] = lists
    f = tmp_path / "engine.yaml"
    f.write_text(yaml.safe_dump(doc))
    return str(f)


def test_a_mapping_to_a_path_the_observation_does_not_have_is_an_error_naming_file_and_path(tmp_path):
    f = _variant(tmp_path, fields={"memory.per_sequence.draft_bytes": r"draft (\d+)"},
                 lists=[{"path": "memory.bound_bytes", "value": "x", "regex": "y"}])
    out = _check(f)
    assert out.returncode == 2, out.stdout
    assert f"{f}: plan.log.fields.memory.per_sequence.draft_bytes: not in the observation schema" in out.stdout
    assert "draft_kv_bytes" in out.stdout                     # what the schema has instead
    assert f"{f}: plan.log.lists[0].path: 'memory.bound_bytes' is not a list" in out.stdout


def test_ledger_categories_and_declared_fields_are_valid_paths(tmp_path):
    f = _variant(tmp_path, fields={"memory.ledger_bytes.padding": r"pad (\d+)", "memory.pool.size_bytes": r"p (\d+)"})
    assert not [x for x in lint(load_engine_file(f)) if x.level == "error"]


def test_fields_the_checks_read_with_no_rule_are_listed(tmp_path):
    out = _check(_variant(tmp_path))
    assert out.returncode == 0, out.stdout
    listed = next(line for line in out.stdout.splitlines() if "plan.log.fields: no rule for memory." in line)
    assert "memory.per_sequence.recurrent_state_bytes" in listed and "memory.max_concurrency" in listed, listed
    assert "memory.ledger_bytes" not in listed     # the log port's pool line itemizes all three categories
    out = _check(_variant(tmp_path, drop=("memory.ledger_bytes.recurrent_state",)))
    listed = next(line for line in out.stdout.splitlines() if "plan.log.fields: no rule for memory." in line)
    assert "memory.ledger_bytes.recurrent_state" in listed and "memory.ledger_bytes.draft_kv" not in listed, listed
    assert "plan.log.trace_step: no rule" in out.stdout


def test_a_sample_line_that_looks_like_a_bound_and_no_rule_maps_is_warned_about(tmp_path):
    sample = tmp_path / "dry-run.log"
    sample.write_text("kv cache: bound_bytes=1024 (--kv-cache-memory-bytes)\n"
                      "draft speculative context: 1.25 GiB NOT counted by gpu_memory_utilization\n"
                      "server: cannot fit 32 sequences\n")
    f = _variant(tmp_path, lists=[])
    out = _check(f, "--sample-log", str(sample))
    assert out.returncode == 0, out.stdout
    assert f"{sample}:2: looks like a bound" in out.stdout and f"{sample}:3: looks like a refusal" in out.stdout
    assert f"{sample}:1:" not in out.stdout                  # mapped by memory.bound_bytes
    mapped = _variant(tmp_path)                               # the shipped lists rule reads line 2
    assert f"{sample}:2:" not in _check(mapped, "--sample-log", str(sample)).stdout


@pytest.mark.skipif(shutil.which("cc") is None, reason="no system C compiler (cc) to build the port")
def test_the_ports_own_output_on_a_case_is_linted():
    out = _check(str(C_PORT / "engine-draft-outside.yaml"), str(C_PORT / "engine.yaml"), "--case", "seed-draft-kv-c8")
    assert out.returncode == 0, out.stdout + out.stderr
    warned = [line for line in out.stdout.splitlines() if line.startswith("warning: c-port-draft-outside-bound on")]
    assert len(warned) == 1 and "NOT counted by gpu_memory_utilization" in warned[0], out.stdout
    assert "warning: c-port on" not in out.stdout             # the sound port's every bound line is mapped
