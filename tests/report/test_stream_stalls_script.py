"""benchmarks/stream_stalls.py: stalls in the token streams of a live run, from the client's chunk times.

A stream of 4 ms gaps with a 12 ms gap every tenth chunk has one stall per 48 ms and an excess of 8 ms in
each 48; two concurrent streams that stall at the same moment are one event, and their windows count once
where they overlap, and waves are counted apart; a stream with no stall has none; a record with too few
chunks is left out.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from conformance.paths import REPO_ROOT
from conformance.run.rundir import read_observations

SCRIPT = REPO_ROOT / "benchmarks" / "stream_stalls.py"


def _script():
    spec = importlib.util.spec_from_file_location("stream_stalls", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _record(start_ms: float, gaps_us: list[int]) -> dict:
    offs = [10_000]
    for g in gaps_us:
        offs.append(offs[-1] + g)
    return {"start_ms": start_ms, "chunk_offsets_us": offs}


STALLED = [12_000 if i % 10 == 9 else 4_000 for i in range(40)]        # 4 stalls in 192 ms of streaming


def test_one_stream_stall_events_and_excess():
    s = _script().stalls_of([_record(0.0, STALLED)], factor=1.6)
    assert s["events"] == 4
    assert s["open_ms"] == pytest.approx(sum(STALLED) / 1000)
    assert s["excess_share"] == pytest.approx(4 * 8 / (sum(STALLED) / 1000))


def test_concurrent_streams_stall_as_one_event_and_overlap_counts_once():
    s = _script().stalls_of([_record(0.0, STALLED), _record(0.5, STALLED)], factor=1.6)
    assert s["events"] == 4                                   # 0.5 ms apart: the same server stall
    assert s["open_ms"] == pytest.approx(sum(STALLED) / 1000 + 0.5)


def test_a_steady_stream_has_no_stall_and_short_records_are_left_out():
    mod = _script()
    assert mod.stalls_of([_record(0.0, [4_000] * 30)], factor=1.6)["events"] == 0
    assert mod.stalls_of([{"start_ms": 0.0, "chunk_offsets_us": [1, 2]}], factor=1.6) == \
        {"events": 0, "open_ms": 0.0, "excess_share": None}


def test_the_script_prints_a_row_per_engine_and_rung(tmp_path):
    """On a committed run (read and validated by `rundir.read_observations`, its directory or its file):
    the table of its ok observations; a missing or invalid file is named, exit 2."""
    run = REPO_ROOT / "suites" / "results" / "live" / "h100-four-runs" / "run-3"
    docs = [d for d in read_observations(run) if d.get("status") == "ok"]
    out = subprocess.run([sys.executable, str(SCRIPT), str(run / "observations.jsonl")], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == _script().table(docs, 1.6) and out.count("\n| vllm | ") == 6, out
    by_dir = subprocess.run([sys.executable, str(SCRIPT), str(run)], capture_output=True, text=True, check=True).stdout
    assert by_dir == out
    bad = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "missing.jsonl")], capture_output=True, text=True)
    assert bad.returncode == 2 and "cannot read" in bad.stderr
    (tmp_path / "observations.jsonl").write_text('{"status": "ok"}\n')
    invalid = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True)
    assert invalid.returncode == 2 and "line 1" in invalid.stderr and "required property" in invalid.stderr


def test_waves_are_counted_apart():
    """Two waves' records share a time base (ms from each wave's start): the same moment in two waves is
    two events, and each wave's window counts."""
    a, b = _record(0.0, STALLED), _record(0.0, STALLED)
    a["repeat"], b["repeat"] = 0, 1
    s = _script().stalls_of([a, b], factor=1.6)
    assert s["events"] == 8 and s["open_ms"] == pytest.approx(2 * sum(STALLED) / 1000)
