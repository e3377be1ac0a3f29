"""Issue item 5: integers in a case must be integers. `max_model_len: 2048.0` was accepted (the
reference refused it, the oracles planned it: a false parity failure); `num_requests: 8.0` errored
on every engine. Both are now a malformed case: exit 2 naming the file and the JSON path."""

from __future__ import annotations

import pytest

from conformance.documents.cases import parse_case
from conformance.errors import CaseError

from ._cli import cli
from ._shapes import case_file


@pytest.mark.parametrize("old,new,json_path", [
    ("max_model_len: 2048", "max_model_len: 2048.0", "scheduler.max_model_len"),
    ("num_requests: 8", "num_requests: 8.0", "workload.num_requests"),
    ("kv_cache_bytes: 268435456", "kv_cache_bytes: 268435456.0", "memory.kv_cache_bytes"),
    ("num_speculative_tokens: 8", "num_speculative_tokens: 8.0", "speculative.num_speculative_tokens"),
])
def test_float_valued_integer_is_a_malformed_case(tmp_path, old, new, json_path):
    path = case_file(tmp_path, replace={old: new})
    ran = cli(["plan", "--engine", "reference", "--case", str(path)], tmp_path)
    assert ran.rc == 2, ran.out[-1000:] + ran.err[-1000:]
    assert f"{path}: {json_path}: " in ran.err and "is not of type 'integer'" in ran.err, ran.err
    assert "Traceback" not in ran.err


def test_true_integers_and_booleans_still_pass(tmp_path):
    import yaml

    doc = yaml.safe_load(case_file(tmp_path).read_text())
    assert parse_case(doc, tmp_path / "ok.yaml").spec["scheduler"]["max_model_len"] == 2048
    doc["scheduler"]["max_num_seqs"] = True    # a boolean is no integer either
    with pytest.raises(CaseError, match=r"scheduler\.max_num_seqs: True is not of type 'integer'"):
        parse_case(doc, tmp_path / "bool.yaml")
