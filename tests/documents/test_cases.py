"""Case loading: shipped cases are valid; mistakes exit 2 with file + JSON path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conformance import paths
from conformance.documents.cases import find_case, load_all, load_case
from conformance.errors import CaseError

SEED = paths.cases_dir() / "seed-unified-pool-c32-k8.yaml"


def _write(tmp_path: Path, mutate) -> Path:
    doc = yaml.safe_load(SEED.read_text())
    mutate(doc)
    p = tmp_path / "case.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_shipped_cases_load_with_unique_ids():
    cases = load_all()
    assert len({c.id for c in cases}) == len(cases) >= 6
    for c in cases:
        assert (c.target_dir / "config.json").is_file()
        assert c.path.stem == c.id, f"{c.path}: file name and id differ"


def test_find_by_id_and_by_path():
    assert find_case("seed-unified-pool-c32-k8").id == "seed-unified-pool-c32-k8"
    assert find_case(str(SEED)).path == SEED


@pytest.mark.parametrize("mutate, expected", [
    (lambda d: d["speculative"].update(num_speculative_tokens=-1),
     "speculative.num_speculative_tokens: -1 is less than the minimum of 1"),
    (lambda d: d["scheduler"].pop("max_model_len"), "scheduler: 'max_model_len' is a required property"),
    (lambda d: d.update(memory={"kv_cache_bytes": 1, "gpu_memory_utilization": 0.5}),
     "memory: exactly one of kv_cache_bytes or gpu_memory_utilization is required"),
    (lambda d: d.update(target="no-such-shape"), "target: model dir"),
    (lambda d: d["acceptance"].update(mode="fixed", accepted_tokens="three"), "acceptance.accepted_tokens: 'three' is not of type 'integer'"),
    (lambda d: d["speculative"].update(method="medusa"), "speculative.method: 'medusa' is not one of"),
])
def test_mistakes_name_file_and_path(tmp_path, mutate, expected):
    p = _write(tmp_path, mutate)
    with pytest.raises(CaseError) as err:
        load_case(p)
    assert any(line.startswith(f"{p}: ") and expected in line for line in err.value.problems), err.value.problems


def test_not_a_mapping(tmp_path):
    p = tmp_path / "list.yaml"
    p.write_text("- 1\n- 2\n")
    with pytest.raises(CaseError, match="a case must be a YAML mapping, got list"):
        load_case(p)


def test_cli_exit_2_without_traceback(tmp_path):
    p = _write(tmp_path, lambda d: d["speculative"].update(num_speculative_tokens=-1))
    out = subprocess.run([sys.executable, "-m", "conformance", "plan", "--engine", "reference", "--case", str(p)],
                         capture_output=True, text=True, cwd=paths.REPO_ROOT)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert f"{p}: speculative.num_speculative_tokens: -1 is less than the minimum of 1" in out.stderr


def test_cli_unknown_engine_and_case():
    for argv, needle in ((["--engine", "tgi", "--case", "seed-unified-pool-c32-k8"], "unknown engine 'tgi'"),
                         (["--engine", "reference", "--case", "nope"], "unknown case 'nope'")):
        out = subprocess.run([sys.executable, "-m", "conformance", "plan", *argv], capture_output=True, text=True,
                             cwd=paths.REPO_ROOT)
        assert out.returncode == 2 and needle in out.stderr and "Traceback" not in out.stderr
