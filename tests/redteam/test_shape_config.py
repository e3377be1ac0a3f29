"""Issue item 6: a model dir's config.json is checked against the shape schema, and the reference
engine's readers refuse what they cannot plan with, naming the file and the key. String head_dim
or max_position_embeddings, 0 KV heads and 0 hidden size gave raw Python exceptions; 0 attention
heads, head_dim 0 and tie_word_embeddings "no" planned as ok; 1e7 layers ran past every timeout."""

from __future__ import annotations

import pytest

from engine_under_test.shapes import read_draft_shape, read_target_shape

from ._cli import cli
from ._shapes import case_file, model_dir

ATTACKS = [
    ("tiny-hybrid", "target", "head_dim", "64"),
    ("tiny-hybrid", "target", "max_position_embeddings", "32768"),
    ("tiny-hybrid", "target", "num_key_value_heads", 0),
    ("tiny-hybrid", "target", "hidden_size", 0),
    ("tiny-hybrid", "target", "num_attention_heads", 0),
    ("tiny-hybrid", "target", "head_dim", 0),
    ("tiny-hybrid", "target", "tie_word_embeddings", "no"),
    ("tiny-hybrid", "target", "num_hidden_layers", 10_000_000),
    ("tiny-dflash", "draft", "num_hidden_layers", 100_000),
    ("tiny-dflash", "draft", "head_dim", 64.0),
]


@pytest.mark.parametrize("shape,role,key,value", ATTACKS, ids=[f"{a[1]}-{a[2]}-{a[3]!r}" for a in ATTACKS])
def test_case_with_a_bad_shape_is_refused_naming_the_key(tmp_path, shape, role, key, value):
    bad = model_dir(tmp_path, shape, f"bad-{role}", **{key: value})
    path = case_file(tmp_path, **{role: bad})
    ran = cli(["plan", "--engine", "reference", "--case", str(path)], tmp_path, timeout_s=30)
    assert ran.rc == 2, ran.out[-1500:] + ran.err[-1500:]
    assert f"{path}: {role}: {bad / 'config.json'}: {key}: " in ran.err, ran.err[-1500:]
    assert "Traceback" not in ran.err   # its time is printed by benchmarks/redteam.py, not asserted


@pytest.mark.parametrize("shape,role,key,value", ATTACKS, ids=[f"{a[1]}-{a[2]}-{a[3]!r}" for a in ATTACKS])
def test_reference_reader_refuses_naming_the_key(tmp_path, shape, role, key, value):
    """The engine reads config.json itself (LLM, serve): its readers refuse the same shapes."""
    bad = model_dir(tmp_path, shape, "bad", **{key: value})
    reader = read_target_shape if role == "target" else read_draft_shape
    with pytest.raises(ValueError, match=rf"config\.json: {key}: "):
        reader(bad)
