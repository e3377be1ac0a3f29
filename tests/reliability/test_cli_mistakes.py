"""Three (and a few more) everyday mistakes in a case file, through the real CLI: the exact message,
naming the file and the JSON path, exit 2, no traceback."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conformance import paths
from conformance.documents.cases import find_case
from conformance.documents.schemas import load_schema


def _base() -> dict:
    return yaml.safe_load(find_case("tiny-dflash-c4-k8").path.read_text())


def _negative_k(doc: dict, tmp: Path) -> list[str]:
    doc["speculative"]["num_speculative_tokens"] = -1
    return ["speculative.num_speculative_tokens: -1 is less than the minimum of 1"]


def _both_bounds(doc: dict, tmp: Path) -> list[str]:
    doc["memory"]["gpu_memory_utilization"] = 0.9
    return ["memory: exactly one of kv_cache_bytes or gpu_memory_utilization is required"]


def _typo_in_a_knob(doc: dict, tmp: Path) -> list[str]:
    doc["scheduler"]["max_num_seq"] = doc["scheduler"].pop("max_num_seqs")
    return ["scheduler: 'max_num_seqs' is a required property",
            "scheduler: unknown field(s) ('max_num_seq' was unexpected)"]


def _model_dir_without_config(doc: dict, tmp: Path) -> list[str]:
    (tmp / "empty-model").mkdir()
    doc["target"] = "./empty-model"
    return [f"target: {tmp / 'empty-model' / 'config.json'}: cannot read: No such file or directory"]


def _unknown_method(doc: dict, tmp: Path) -> list[str]:
    doc["speculative"]["method"] = "medusa"
    known = load_schema("case")["properties"]["speculative"]["properties"]["method"]["enum"]
    return [f"speculative.method: 'medusa' is not one of {known!r}"]


MISTAKES = [_negative_k, _both_bounds, _typo_in_a_knob, _model_dir_without_config, _unknown_method]


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.__name__.strip("_") for m in MISTAKES])
def test_cli_names_the_file_and_the_json_path(mistake, tmp_path):
    doc = copy.deepcopy(_base())
    expected = mistake(doc, tmp_path)
    case_file = tmp_path / "my-case.yaml"
    case_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = subprocess.run([sys.executable, "-m", "conformance", "plan", "--engine", "reference", "--case", str(case_file)],
                          capture_output=True, text=True, cwd=str(paths.REPO_ROOT), timeout=60)
    want = "conformance plan: " + "\n".join(f"{case_file}: {line}" for line in expected) + "\n"
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", want)
    print(f"\n$ conformance plan --engine reference --case {case_file.name}  # exit {proc.returncode}\n{proc.stderr}",
          end="")
