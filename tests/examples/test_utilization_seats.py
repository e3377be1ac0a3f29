"""On a gpu_memory_utilization case each engine sizes its own pool from the device's memory less its
own reserves, so `memory.seats_equal_vllm` compares seats per pool byte and `trace.equals_vllm`
skips (naming both pools) where the pools differ. The defect that check exists for still fails it:
the stand-in port's two-pools defect on the utilisation case, through one `conformance run`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conformance import paths
from conformance.run.rundir import load_report, resolve_run_dir

PORT_DIR = paths.REPO_ROOT / "examples" / "defective-port"
CASE = "tiny-dflash-c4-k8-util"


def _engine_file(directory: Path, name: str, defects: list[str]) -> Path:
    base = yaml.safe_load((PORT_DIR / "engine.yaml").read_text())
    doc = dict(base, name=name, defects=defects,
               plan={"command": dict(base["plan"]["command"],
                                     argv=["{python}", str(PORT_DIR / "port.py"), "--defects", "{defects}"])})
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory) -> dict[tuple[str, str], dict]:
    d = tmp_path_factory.mktemp("util-ports")
    engines = ",".join(["reference", str(_engine_file(d, "port-sound", [])),
                        str(_engine_file(d, "port-two-pools", ["two-pools"]))])
    run = subprocess.run([sys.executable, "-m", "conformance", "run", "--engines", engines, "--cases", CASE,
                          "--out", str(d / "out")], capture_output=True, text=True, cwd=str(paths.REPO_ROOT),
                         timeout=900)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]    # the defect fails a check
    report = load_report(resolve_run_dir(d / "out" / "latest"))
    return {(v.check, v.engine): v.to_json() for v in report.verdicts if v.case_id == CASE}


def test_the_two_pools_defect_fails_seats_per_pool_byte(verdicts):
    v = verdicts[("memory.seats_equal_vllm", "port-two-pools")]
    assert v["outcome"] == "fail", v
    assert "seats per byte" in v["message"] and "fewer" in v["message"]


def test_sound_engines_pass_seats_in_their_own_pools(verdicts):
    for engine in ("reference", "port-sound"):
        v = verdicts[("memory.seats_equal_vllm", engine)]
        assert v["outcome"] == "pass", v
        assert "in its own pool of" in v["message"]


def test_traces_of_pools_of_different_bytes_are_skipped_naming_both(verdicts):
    v = verdicts[("trace.equals_vllm", "reference")]
    assert v["outcome"] == "skip" and "pools differ" in v["message"], v
