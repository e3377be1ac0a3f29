"""benchmarks/runtime_defects.py's reading of one defect (`run`), on a small tree the test writes: a
defect whose test fails is killed; one whose test still passes survived; one whose tests all skip
(as the prompt-pass conv kernel's do without CUDA or Triton) is not judged here, not survived; a
snippet found another number of times than the table says is reported stale. Each runs pytest
in a subprocess over the tree, as the script does."""

from __future__ import annotations

import importlib.util

import pytest

from conformance.paths import REPO_ROOT


@pytest.fixture(scope="module")
def defects():
    spec = importlib.util.spec_from_file_location("runtime_defects", REPO_ROOT / "benchmarks" / "runtime_defects.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "engine_mod.py").write_text("VALUE = 1\nOTHER = 1\n")
    (tmp_path / "test_value.py").write_text("import engine_mod\n\n\ndef test_value():\n    assert engine_mod.VALUE == 1\n")
    (tmp_path / "test_skips.py").write_text('import pytest\n\npytest.skip("needs a card", allow_module_level=True)\n')
    return tmp_path


@pytest.mark.parametrize("snippet, replacement, count, tests, outcome", [
    ("VALUE = 1", "VALUE = 2", 1, ("test_value.py",), "killed"),
    ("OTHER = 1", "OTHER = 2", 1, ("test_value.py",), "SURVIVED"),
    ("VALUE = 1", "VALUE = 2", 1, ("test_skips.py",), "not judged here"),
    ("VALUE = 1", "VALUE = 2", 2, ("test_value.py",), "SURVIVED"),
])
def test_one_defects_outcome(defects, tree, snippet, replacement, count, tests, outcome):
    defect = defects.Defect("a defect", "engine_mod.py", snippet, replacement, count, tests)
    got, summary = defects.run(defect, tree)
    assert got == outcome, summary
    assert (tree / "engine_mod.py").read_text() == "VALUE = 1\nOTHER = 1\n"      # the edit is undone
    if count == 2:
        assert summary.startswith("STALE: the snippet occurs 1 times")
    elif outcome == "not judged here":
        assert "1 skipped" in summary
