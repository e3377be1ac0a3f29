"""Property: no case file, however broken, gets past `load_case` or the CLI as a traceback.

Every rejection is a `CaseError` whose every line names the file and a JSON path
(`file: json.path: message`); inputs broken by construction are always rejected, at the JSON
path the mutation touched. Accepted inputs are real cases that serialize as strict JSON (what
adapters receive). `pytest tests/reliability/test_case_fuzz.py -s` prints the tally.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance import paths
from conformance.documents.cases import Case, load_case
from conformance.errors import CaseError

from .case_strategies import (MAYBE_VALID_KINDS, MUTATION_KINDS, RAW_KINDS, FuzzInput, any_input, base_documents,
                              dump, input_of_kind, make_faulty_model_dirs)
from .fuzz_tally import rejection_kind

# `json.path: message`: (root), dotted names, [index] items, ["odd key"] members.
PATH_RE = re.compile(r'((?:\(root\)|[A-Za-z_][A-Za-z0-9_]*)(?:\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\]|\["(?:[^"\\]|\\.)*"\]'
                     r"|\[[^\]]*\])*): \S")

FUZZ_SETTINGS = settings(max_examples=1000, deadline=None, database=None,
                         suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="session")
def fuzz_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("case-fuzz")
    make_faulty_model_dirs(root)
    return root


def _write(root: Path, n: int, inp: FuzzInput) -> Path:
    f = root / f"case-{n:05d}-{inp.kind}.yaml"
    f.write_bytes(inp.content)
    return f


def named_paths(problems: list[str], source: Path) -> list[str]:
    """The JSON path each problem line names; fails the test on a line that names no file or path."""
    out = []
    for line in problems:
        assert line.startswith(f"{source}: "), f"problem line does not name the file {source}: {line!r}"
        m = PATH_RE.match(line[len(f"{source}: "):])
        assert m, f"problem line names no JSON path: {line!r}"
        out.append(m.group(1))
    return out


def check_outcome(inp: FuzzInput, source: Path, outcome: Case | CaseError) -> None:
    if isinstance(outcome, Case):
        assert not inp.must_reject, f"{inp.kind} input was accepted:\n{inp.content[:400]!r}"
        json.dumps(outcome.to_json(), allow_nan=False)  # adapters get strict JSON
        return
    assert outcome.problems, "a CaseError with no problem lines"
    where = named_paths(outcome.problems, source)
    if inp.expected_path is not None:
        assert inp.expected_path in where, (
            f"{inp.kind}: expected a problem at {inp.expected_path}, got:\n" + "\n".join(outcome.problems))


def test_shipped_bases_are_valid(fuzz_root):
    """The mutations start from valid documents (else 'rejected' would prove nothing)."""
    for i, doc in enumerate(base_documents()):
        load_case(_write(fuzz_root, 90000 + i, FuzzInput("base", dump(doc), False, None)))


@FUZZ_SETTINGS
@given(inp=any_input())
def test_load_case_never_tracebacks(inp: FuzzInput, fuzz_root: Path, fuzz_tally):
    fuzz_tally.num_examples += 1
    fuzz_tally.inputs_by_kind[inp.kind] += 1
    source = _write(fuzz_root, fuzz_tally.num_examples, inp)
    try:
        outcome: Case | CaseError = load_case(source)
        fuzz_tally.num_accepted += 1
    except CaseError as exc:
        outcome = exc
        for line in exc.problems:
            fuzz_tally.rejections_by_kind[rejection_kind(line[len(str(source)) + 2:])] += 1
    except Exception as exc:
        fuzz_tally.tracebacks.append(f"{inp.kind}: {type(exc).__name__}: {str(exc)[:160]}")
        raise
    check_outcome(inp, source, outcome)


REJECTED_KINDS = [k for k in MUTATION_KINDS + RAW_KINDS if k not in MAYBE_VALID_KINDS]


@pytest.mark.parametrize("kind", REJECTED_KINDS)
@settings(max_examples=1, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_cli_rejects_with_exit_2(kind: str, data, fuzz_root: Path, fuzz_tally):
    """`conformance plan --engine reference --case FILE` in a real subprocess: exit 2, no traceback,
    nothing on stdout, every stderr line names the file and a JSON path."""
    inp = data.draw(input_of_kind(kind))
    fuzz_tally.num_cli_runs += 1
    source = _write(fuzz_root, 80000 + fuzz_tally.num_cli_runs, inp)
    proc = subprocess.run([sys.executable, "-m", "conformance", "plan", "--engine", "reference", "--case", str(source)],
                          capture_output=True, text=True, cwd=str(paths.REPO_ROOT), timeout=60)
    if "Traceback" in proc.stderr:
        fuzz_tally.tracebacks.append(f"cli {kind}: {proc.stderr.strip().splitlines()[-1][:160]}")
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, f"exit {proc.returncode}\n{proc.stderr}"
    assert proc.stdout == ""
    assert proc.stderr.startswith("conformance plan: "), proc.stderr
    problems = proc.stderr[len("conformance plan: "):].rstrip("\n").split("\n")
    where = named_paths(problems, source)
    if inp.expected_path is not None:
        assert inp.expected_path in where, proc.stderr
