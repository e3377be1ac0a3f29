"""The drafting-reservation seed (bug 3) is a case where the pinned vLLM reserves slots: DFlash reserves 0
under vLLM 0.33, so the seed is PARD, and the stand-in port's no-drafting-reservation defect fails on it
while the sound port passes (through `conformance run`, judged against vLLM's recorded goldens)."""

from __future__ import annotations

import subprocess
import sys

import yaml

from conformance import paths
from conformance.checks.goldens import find_golden
from conformance.documents.cases import find_case, load_all
from conformance.run.rundir import load_report, resolve_run_dir

SEED = "seed-drafting-reservation-pard"
PORT = paths.REPO_ROOT / "examples" / "defective-port"


def _slots(case_id: str) -> int:
    return find_golden("budget", "vllm", case_id)["budget"]["drafting_slots_per_request"]


def test_vllm_reserves_no_slot_on_the_dflash_seeds_and_some_on_the_reservation_seed():
    seeds = [c for c in load_all() if "seed" in c.spec.get("tags", [])]
    dflash = [c.id for c in seeds if c.spec["speculative"]["method"] == "dflash"]
    assert dflash and all(_slots(c) == 0 for c in dflash)
    assert find_case(SEED).spec["speculative"]["method"] != "dflash" and _slots(SEED) > 0
    readme = (paths.REPO_ROOT / "README.md").read_text()
    seed_bugs = readme[readme.index("## What it checks"):readme.index("## Layout")]
    assert "DFlash reserves\n   0 drafting slots" in seed_bugs and SEED in seed_bugs


def test_the_no_reservation_defect_fails_the_reservation_seed_and_the_sound_port_passes(tmp_path):
    base = yaml.safe_load((PORT / "engine.yaml").read_text())
    files = []
    for name, defects in (("port-sound", []), ("port-no-reservation", ["no-drafting-reservation"])):
        doc = dict(base, name=name, defects=defects)
        doc["plan"] = {"command": dict(base["plan"]["command"],
                                       argv=["{python}", str(PORT / "port.py"), "--defects", "{defects}"])}
        f = tmp_path / f"{name}.yaml"
        f.write_text(yaml.safe_dump(doc, sort_keys=False))
        files.append(str(f))
    out = subprocess.run([sys.executable, "-m", "conformance", "run", "--engines", ",".join(files), "--cases", SEED,
                          "--out", str(tmp_path / "reports")], capture_output=True, text=True,
                         cwd=str(paths.REPO_ROOT), timeout=900)
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    verdicts = load_report(resolve_run_dir(tmp_path / "reports" / "latest")).verdicts
    failed = {(v.engine, v.check) for v in verdicts if v.outcome == "fail"}
    assert not [c for e, c in failed if e == "port-sound"], failed
    assert {("port-no-reservation", c) for c in ("budget.parity_with_vllm", "trace.equals_vllm",
                                                  "trace.steps_within_budget")} <= failed, failed
    parity = next(v for v in verdicts if (v.engine, v.check) == ("port-no-reservation", "budget.parity_with_vllm"))
    assert f"drafting_slots_per_request: vLLM {_slots(SEED)}, port-no-reservation 0" in parity.message
