"""benchmarks/wave_clusters.py: the first-token groups of a rung's waves and each group's TPOT.

A wave of 32 whose first 16 requests get their first token at 100 ms and the other 16 at 190 ms, all ending
at 400 ms, has two groups with TPOTs of 300 / 127 and 210 / 127 ms, and its TPOT p50 lies between them; the
times are from the wave's first request sent, waves are shown apart, a failed record is left out, and a
rung not asked for is not shown.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from conformance.paths import REPO_ROOT

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
    doc = {"status": "ok", "engine": {"name": "reference"},
           "throughput": {"rungs": [{"concurrency": 1, "records": [_record(0.0, 15.0, 120.0)]},
                                    {"concurrency": 32, "records": _wave(0.0)}]}}
    obs = tmp_path / "observations.jsonl"
    obs.write_text(json.dumps(doc) + "\n")
    out = subprocess.run([sys.executable, str(SCRIPT), str(obs)], capture_output=True, text=True, check=True).stdout
    assert "| reference | 32 | 0 | 16 at 100 - 103 (2.35) · 16 at 190 - 193 (1.64) | 400 |" in out, out
    assert "| reference | 1 |" not in out
    one = subprocess.run([sys.executable, str(SCRIPT), str(obs), "--concurrency", "1"], capture_output=True,
                         text=True, check=True).stdout
    assert "| reference | 1 | 0 | 1 at 15 (0.83) | 120 | 0.83 |" in one, one
    bad = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "missing.jsonl")], capture_output=True, text=True)
    assert bad.returncode == 2 and "cannot read" in bad.stderr
