"""Issue item 8: broken goldens through `conformance run`. A golden with `"engine": null` crashed the
run (traceback, no report); an invalid-JSON golden was summarised as "no golden to compare with".
Now the run writes its report, and each broken golden fails its check as what it is."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

from conformance import paths

from ._cli import cli

CASE = "tiny-dflash-c4-k8"


def _goldens(tmp_path: Path) -> Path:
    root = tmp_path / "goldens"
    for f in paths.goldens_dir().glob(f"*/*/*[[]reference-{CASE}[]].json"):
        dest = root / f.relative_to(paths.goldens_dir())
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, dest)
    assert len(list(root.glob("*/*/*.json"))) == 3
    return root


def _run(tmp_path: Path, goldens: Path):
    out = tmp_path / "reports"
    ran = cli(["run", "--engines", "reference", "--cases", CASE, "--out", str(out)], tmp_path, timeout_s=240,
              DFLASH_CONFORMANCE_GOLDENS=str(goldens), COLUMNS="400")
    run_dir = out / (out / "latest").readlink() if (out / "latest").is_symlink() else None
    return ran, run_dir


def _failures(run_dir: Path) -> dict[str, str]:
    tree = ET.parse(run_dir / "junit.xml").getroot()
    return {tc.get("name"): (tc.find("failure").get("message") or "") for tc in tree.iter("testcase")
            if tc.find("failure") is not None}


def test_golden_with_null_engine_fails_its_check_and_the_report_is_written(tmp_path):
    goldens = _goldens(tmp_path)
    (budget,) = goldens.glob("budget/*/*.json")
    doc = json.loads(budget.read_text())
    doc["engine"] = None
    budget.write_text(json.dumps(doc))
    ran, run_dir = _run(tmp_path, goldens)
    assert ran.rc == 1 and "Traceback" not in ran.err, ran.out[-2000:] + ran.err[-2000:]
    assert run_dir is not None and (run_dir / "index.html").is_file()
    failed = _failures(run_dir)
    assert any("budget.golden" in name for name in failed), failed


def test_invalid_json_golden_is_reported_unreadable_not_missing(tmp_path):
    goldens = _goldens(tmp_path)
    (memory,) = goldens.glob("memory/*/*.json")
    memory.write_text('{"golden_format": 1, "engine": ')
    ran, run_dir = _run(tmp_path, goldens)
    assert ran.rc == 1 and "Traceback" not in ran.err, ran.out[-2000:] + ran.err[-2000:]
    assert "memory.golden: unreadable golden: " in ran.out, ran.out[-2000:]   # listed as what it is
    failed_lines = [l for l in ran.out.splitlines() if "no golden to compare with" in l]
    assert len(failed_lines) <= 1 and "memory" not in "".join(failed_lines), failed_lines
    failed = _failures(run_dir)
    (name,) = [n for n in failed if "memory.golden" in n]
    assert "unreadable golden" in failed[name] and "not valid JSON" in failed[name], failed[name]
