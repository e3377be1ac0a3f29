"""A run's provenance names the code it ran where git cannot: `source_digest` over the framework's
package and the reference engine, the same for two copies of one code, different for any edit."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conformance import paths
from conformance.run.provenance import SOURCE_ROOTS, run_provenance, source_digest


@pytest.fixture
def copied_checkout(tmp_path, monkeypatch) -> Path:
    """A copy of the checkout's source roots, without .git, as the repository root."""
    for name in SOURCE_ROOTS:
        shutil.copytree(paths.REPO_ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    here = source_digest()
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)
    assert source_digest() == here              # the same code, elsewhere, with no git: the same digest
    return tmp_path


def test_the_digest_ignores_compiled_caches(copied_checkout):
    before = source_digest()
    cache = copied_checkout / "conformance" / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "x.cpython-311.pyc").write_bytes(b"\0" * 16)
    assert source_digest() == before


@pytest.mark.parametrize("root", SOURCE_ROOTS)
def test_any_edit_of_the_code_changes_the_digest(copied_checkout, root):
    before = source_digest()
    victim = sorted((copied_checkout / root).rglob("*.py"))[0]
    victim.write_bytes(victim.read_bytes() + b"\n")
    edited = source_digest()
    assert edited != before
    (copied_checkout / root / "new_module.py").write_text("")
    assert source_digest() not in (before, edited)


def test_a_run_records_the_digest_beside_the_commit():
    prov = run_provenance(None)
    assert prov["source_digest"] == source_digest() and prov["source_digest"].startswith("sha256:")
    assert "framework_commit" in prov and "framework_dirty" in prov
