"""Issue item 4: reads of model dirs and case files are guarded. config.json as a symlink to
/dev/zero read until memory ran out; a FIFO hung forever (a case file as FIFO too, in every
`load_all`); JSON nested 200k deep or a 5000-digit integer gave a traceback. Now: exit 2 naming the
file, fast and small, from the CLI; ValueError naming the file from the engine's own readers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conformance import paths

from ._cli import cli
from ._shapes import case_file, model_dir


def _poison(tmp_path, kind: str):
    """A copy of tiny-hybrid whose config.json is the attack `kind`."""
    bad = model_dir(tmp_path, "tiny-hybrid", f"target-{kind}")
    cfg = bad / "config.json"
    cfg.unlink()
    if kind == "dev-zero":
        os.symlink("/dev/zero", cfg)
    elif kind == "fifo":
        os.mkfifo(cfg)
    elif kind == "deep":
        cfg.write_text("[" * 200_000 + "]" * 200_000)
    elif kind == "huge-int":
        doc = json.loads((paths.MODELS_DIR / "tiny-hybrid" / "config.json").read_text())
        cfg.write_text(json.dumps(doc)[:-1] + ', "vocab_size_x": ' + "9" * 5000 + "}")
    elif kind == "big":   # a valid config, padded past the size cap
        doc = json.loads((paths.MODELS_DIR / "tiny-hybrid" / "config.json").read_text())
        cfg.write_text(json.dumps(dict(doc, pad="x" * (2 << 20))))
    return bad


KINDS = ["dev-zero", "fifo", "deep", "huge-int", "big"]


@pytest.mark.parametrize("kind", KINDS)
def test_case_naming_a_poisoned_config_json_exits_2(tmp_path, kind):
    bad = _poison(tmp_path, kind)
    path = case_file(tmp_path, target=bad)
    ran = cli(["plan", "--engine", "reference", "--case", str(path)], tmp_path, timeout_s=30)
    assert ran.rc == 2, ran.err[-1500:]
    assert f"{path}: target: {bad / 'config.json'}: " in ran.err, ran.err[-1500:]
    assert "Traceback" not in ran.err and "MemoryError" not in ran.err
    # time and memory: benchmarks/redteam.py prints them; `cli` kills a child still running after 30 s


def test_fifo_case_file_in_the_cases_dir_does_not_hang(tmp_path):
    cases = tmp_path / "cases"
    cases.mkdir()
    shutil.copy(paths.cases_dir() / "tiny-dflash-c4-k8.yaml", cases)
    os.mkfifo(cases / "zz-fifo.yaml")
    ran = cli(["run", "--cases", "tiny-*", "--cases-dir", str(cases), "--engines", "reference",
               "--out", str(tmp_path / "reports")], tmp_path, timeout_s=30)
    assert ran.rc == 2, ran.err[-1500:]
    assert f"{cases / 'zz-fifo.yaml'}: (root): not a regular file" in ran.err, ran.err[-1500:]


@pytest.mark.parametrize("reader", ["engine_under_test.shapes:read_target_shape",
                                    "engine_under_test.model.model_config:TargetModelConfig.from_dir"])
@pytest.mark.parametrize("kind", KINDS)
def test_engine_readers_refuse_poisoned_config_json(tmp_path, kind, reader):
    bad = _poison(tmp_path, kind)
    module, func = reader.split(":")
    code = (f"import sys, {module} as m\nf = m\nfor part in {func!r}.split('.'): f = getattr(f, part)\n"
            f"try:\n    f(sys.argv[1])\nexcept ValueError as exc:\n    print('REFUSED', exc); sys.exit(2)\n")
    try:
        out = subprocess.run([sys.executable, "-c", code, str(bad)], capture_output=True, text=True, timeout=30,
                             cwd=str(paths.REPO_ROOT), env=dict(os.environ, PYTHONPATH=str(paths.REPO_ROOT)))
    except subprocess.TimeoutExpired:
        pytest.fail(f"{reader} on a {kind} config.json still running after 30 s")
    assert out.returncode == 2, out.stdout[-1000:] + out.stderr[-1500:]
    assert f"REFUSED {bad / 'config.json'}" in out.stdout, out.stdout
