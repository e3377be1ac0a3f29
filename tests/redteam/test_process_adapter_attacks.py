"""Issue item 9: the process adapter. A missing binary gave a traceback; now it is an error
observation (plan and live). Logged argv lines are shell-quoted (`shlex.join`): pasting one runs
the same argv, never an injected command."""

from __future__ import annotations

import json
import shlex
import subprocess

import yaml

from conformance import paths
from conformance.harness.supervise import argv_line

from ._cli import cli

MISSING = "/nonexistent/dflash-engine-binary"


def test_command_plan_with_a_missing_binary_is_an_error_observation(tmp_path):
    engine = tmp_path / "missing.yaml"
    engine.write_text(f"name: missing\nrole: under-test\nversion: '1'\nplan:\n  command:\n    argv: [{MISSING}]\n")
    out = tmp_path / "obs.jsonl"
    ran = cli(["plan", "--engine", str(engine), "--case", "tiny-dflash-c4-k8", "--out", str(out)], tmp_path)
    assert ran.rc == 1 and "Traceback" not in ran.err, ran.err[-2000:]
    (obs,) = [json.loads(l) for l in out.read_text().splitlines() if l.strip()]
    assert obs["status"] == "error" and f"could not start {MISSING!r}" in obs["message"], obs["message"]


def test_live_manifest_with_a_missing_binary_is_an_error_observation(tmp_path):
    engine_file = paths.REPO_ROOT / "conformance/engines/engine_files/reference.yaml"
    doc = {"engine": "reference", **yaml.safe_load(engine_file.read_text())["live"]}   # its manifest, as a file
    assert doc["command"][0] == "{python}"
    doc["command"][0] = MISSING
    manifest = tmp_path / "missing-manifest.yaml"
    manifest.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert MISSING in manifest.read_text()
    out = tmp_path / "obs.jsonl"
    ran = cli(["ladder", "--manifest", str(manifest), "--case", "tiny-dflash-c4-k8", "--concurrency", "1",
               "--out", str(out)], tmp_path, timeout_s=120)
    assert "Traceback" not in ran.err, ran.err[-3000:]
    assert ran.rc == 1, ran.out[-2000:] + ran.err[-2000:]
    assert f"could not start {MISSING!r}" in ran.out + ran.err + (out.read_text() if out.exists() else "")


def test_logged_argv_lines_paste_back_to_the_same_argv(tmp_path):
    marker = tmp_path / "injected"
    argv = ["echo", f"x; touch {marker}", "$(touch " + str(marker) + ")", "`id`", "a b", "it's"]
    line = argv_line(argv)
    assert line.startswith("$ ")
    assert shlex.split(line[2:]) == argv
    done = subprocess.run(["bash", "-c", line[2:]], capture_output=True, text=True, timeout=10)
    assert not marker.exists(), "pasting the logged line ran an injected command"
    assert done.stdout.strip() == " ".join(argv[1:])
