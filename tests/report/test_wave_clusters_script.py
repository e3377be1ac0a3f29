"""benchmarks/wave_clusters.py: the first-token groups of a rung's waves and each group's TPOT.

A wave of 32 whose first 16 requests get their first token at 100 ms and the other 16 at 190 ms, all ending
at 400 ms, has two groups with TPOTs of 300 / 127 and 210 / 127 ms, and its TPOT p50 lies between them; the
times are from the wave's first request sent, waves are shown apart, a failed record is left out, and a
rung not asked for is not shown; the script reads a run through `rundir.read_observations`.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from conformance.paths import REPO_ROOT
from conformance.run.rundir import read_observations

SCRIPT = REPO_ROOT / "benchmarks" / "wave_clusters.py"


def _script():
    spec = importlib.util.spec_from_file_location("wave_clusters", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _record(start_ms: float, first_ms: float, last_ms: float, repeat: int = 0, n: int = 128) -> dict:
    """One request sent at `start_ms` whose first and last tokens came at those times (ms, the same base)."""
    offs = [round((first_ms - start_ms) * 1000), round((last_ms - start_ms) * 1000)]
    return {"start_ms": start_ms, "chunk_offsets_us": offs, "num_output_tokens": n, "repeat": repeat, "error": None}


def _wave(t0: float, repeat: int = 0) -> list[dict]:
    return ([_record(t0 + 0.1 * i, t0 + 100 + 0.2 * i, t0 + 400, repeat) for i in range(16)]
            + [_record(t0 + 0.1 * i, t0 + 190 + 0.2 * i, t0 + 400, repeat) for i in range(16)])


def test_two_groups_one_prefill_step_apart_and_the_p50_between_them():
    (wave,) = _script().waves_of(_wave(1000.0), gap_ms=5.0)
    assert [g["n"] for g in wave["groups"]] == [16, 16]
    first, second = wave["groups"]
    assert first["first_ms"] == pytest.approx(100) and first["last_first_ms"] == pytest.approx(103)
    assert second["first_ms"] == pytest.approx(190)
    assert first["tpot_ms"] > 2.3 > second["tpot_ms"] > 1.6          # about 2.35 and 1.64
    assert second["tpot_ms"] < wave["tpot_p50_ms"] < first["tpot_ms"]
    assert wave["end_ms"] == pytest.approx(400)


def test_waves_apart_and_failed_records_left_out():
    mod = _script()
    recs = _wave(0.0, repeat=0) + _wave(5000.0, repeat=1)
    recs.append(dict(_record(0.0, 50.0, 60.0), error="HTTP 500"))
    waves = mod.waves_of(recs, gap_ms=5.0)
    assert [w["wave"] for w in waves] == [0, 1]
    assert all(sum(g["n"] for g in w["groups"]) == 32 for w in waves)
    assert waves[1]["groups"][0]["first_ms"] == pytest.approx(100)  # from that wave's own start
    one = mod.waves_of(recs, gap_ms=100.0)                          # a wider gap: one group
    assert [g["n"] for g in one[0]["groups"]] == [32]


def test_the_script_prints_the_chosen_rung(tmp_path):
    """On a committed run (read and validated by `rundir.read_observations`): c = 32 by default, the rungs
    asked for otherwise; a missing or invalid file is named, exit 2."""
    run = REPO_ROOT / "suites" / "results" / "live" / "h100-four-runs" / "run-3"
    docs = [d for d in read_observations(run) if d.get("status") == "ok"]
    mod = _script()
    out = subprocess.run([sys.executable, str(SCRIPT), str(run / "observations.jsonl")], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == mod.table(docs, {32}, 5.0) and "| reference | 32 | 0 | 16 at" in out, out
    assert "| reference | 1 |" not in out
    one = subprocess.run([sys.executable, str(SCRIPT), str(run), "--concurrency", "1", "--concurrency", "8"],
                         capture_output=True, text=True, check=True).stdout
    assert one.strip() == mod.table(docs, {1, 8}, 5.0) and "| vllm | 8 | 2 |" in one
    bad = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "missing.jsonl")], capture_output=True, text=True)
    assert bad.returncode == 2 and "cannot read" in bad.stderr
    (tmp_path / "observations.jsonl").write_text('{"status": "ok"}\n')
    invalid = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True)
    assert invalid.returncode == 2 and "line 1" in invalid.stderr and "required property" in invalid.stderr
