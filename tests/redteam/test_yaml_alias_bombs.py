"""Issue item 2: a 1 KB YAML alias bomb is refused fast (exit 2, a message naming the file),
wherever it sits: under an unknown key, inside a schema-valid free-form field
(`intended_differences[].expected`), in an engine file, in a live manifest."""

from __future__ import annotations

from pathlib import Path

import yaml

from conformance import paths

from ._cli import alias_bomb, cli

CASE = (paths.cases_dir() / "tiny-dflash-c4-k8.yaml").read_text()


def _check_refused(ran, path: Path) -> None:
    assert ran.rc == 2, f"exit {ran.rc}, stderr:\n{ran.err[-2000:]}"
    assert str(path) in ran.err and "aliases" in ran.err, ran.err[-2000:]
    assert "Traceback" not in ran.err
    # time and memory are printed by benchmarks/redteam.py, not asserted here (a forked child's peak RSS
    # counts the parent's pages, and these machines are noisy); `cli` kills a child that hangs


def test_bomb_under_an_unknown_key_of_a_case(tmp_path):
    bomb = tmp_path / "bomb-unknown-key.yaml"
    bomb.write_text(CASE.replace("id: tiny-dflash-c4-k8", "id: bomb") + "junk:\n" + alias_bomb())
    assert bomb.stat().st_size < 2048
    ran = cli(["plan", "--engine", "reference", "--case", str(bomb)], tmp_path)
    _check_refused(ran, bomb)


def test_bomb_inside_intended_differences_expected(tmp_path):
    bomb = tmp_path / "bomb-expected.yaml"
    bomb.write_text(CASE.replace("id: tiny-dflash-c4-k8", "id: bomb") + "intended_differences:\n"
                    "  - oracle: vllm\n    engines: [reference]\n    field: budget.max_active_seqs\n    reason: a bomb\n    expected:\n"
                    + alias_bomb(indent="      "))
    ran = cli(["run", "--engines", "reference", "--cases", str(bomb), "--out", str(tmp_path / "reports")], tmp_path)
    _check_refused(ran, bomb)
    assert not list((tmp_path / "reports").glob("*/index.html")), "a run directory was written for a bad case"


def test_bomb_in_an_engine_file(tmp_path):
    engine = tmp_path / "bomb-engine.yaml"
    engine.write_text("name: bomb\nrole: under-test\nplan:\n  command:\n    argv: [/bin/true]\n"
                      "description: x\njunk:\n" + alias_bomb())
    ran = cli(["plan", "--engine", str(engine), "--case", "tiny-dflash-c4-k8"], tmp_path)
    _check_refused(ran, engine)


def test_bomb_in_a_live_manifest(tmp_path):
    manifest = tmp_path / "bomb-manifest.yaml"
    live = yaml.safe_load((paths.REPO_ROOT / "conformance/engines/engine_files/reference.yaml").read_text())["live"]
    manifest.write_text(yaml.safe_dump({"engine": "reference", **live}, sort_keys=False) + "\njunk:\n" + alias_bomb())
    ran = cli(["ladder", "--manifest", str(manifest), "--case", "tiny-dflash-c4-k8"], tmp_path)
    _check_refused(ran, manifest)
