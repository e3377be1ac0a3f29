"""The `vllm bench serve` anchor's inputs: the trace it replays and the arguments it runs with.

Open loop must hand vLLM's bench exactly the schedule this client sends on (the trace's
timestamps, read only with --self-timed, no concurrency cap); closed loop must not be timed by
the trace.
"""

from __future__ import annotations

import json

import pytest

from benchmarks import vllm_bench_client as vb
from benchmarks.loadgen_vs_vllm_bench import arrival_offsets
from benchmarks.loopback_capture import WireRequest, turnarounds_s
from conformance.loadgen.arrivals import arrival_offsets_s
from conformance.loadgen.settings import LoadgenSettings


def test_trace_carries_each_requests_arrival(tmp_path):
    offsets = arrival_offsets(5, 2.0)
    lines = [json.loads(x) for x in vb.write_trace(tmp_path / "t.jsonl", 5, 40, 8, offsets).read_text().splitlines()]
    assert [x["timestamp"] for x in lines] == offsets
    assert all(len(x["hash_ids"]) == 3 for x in lines)                  # ceil(40 / 16) ids a prompt
    assert len({i for x in lines for i in x["hash_ids"]}) == 15          # no two prompts share a chunk
    closed = [json.loads(x) for x in vb.write_trace(tmp_path / "c.jsonl", 5, 40, 8).read_text().splitlines()]
    assert {x["timestamp"] for x in closed} == {0}
    with pytest.raises(ValueError, match="4 timestamps for 5 requests"):
        vb.write_trace(tmp_path / "x.jsonl", 5, 40, 8, offsets[:4])


def test_open_loop_schedule_is_the_one_this_client_sends_on():
    """The benchmark's schedule equals the ladder's own draw for the settings its `ours` run uses."""
    s = LoadgenSettings(concurrencies=(1,), request_rates_per_s=(2.0,), arrival="poisson", arrival_seed=0)
    ladder = arrival_offsets_s(16, 2.0, s.arrival, s.burstiness, seed=s.arrival_seed)
    assert arrival_offsets(16, 2.0) == ladder
    assert arrival_offsets(16, 2.0, seed=1) != ladder


def test_bench_arguments_open_and_closed(tmp_path):
    open_ = vb.bench_argv("http://h:1", "m", tmp_path, tmp_path / "t", None, 16, tmp_path, "r.json")
    closed = vb.bench_argv("http://h:1", "m", tmp_path, tmp_path / "t", 4, 16, tmp_path, "r.json")
    assert "--self-timed" in open_ and "--max-concurrency" not in open_ and "--no-self-timed" not in open_
    assert open_[open_.index("--num-warmups") + 1] == str(vb.OPEN_LOOP_WARMUPS)
    assert "--no-self-timed" in closed and closed[closed.index("--max-concurrency") + 1] == "4"
    assert closed[closed.index("--request-rate") + 1] == "inf"


def test_turnaround_is_each_post_after_the_latest_stream_end():
    # two slots: a ends at 1.0, b at 1.5; c is sent at 1.2 (0.2 after a), d at 1.6 (0.1 after b)
    a, b = WireRequest(0.0, (0.5, 1.0)), WireRequest(0.1, (0.6, 1.5))
    c, d = WireRequest(1.2, (1.7, 2.0)), WireRequest(1.6, (1.9, 2.2))
    assert turnarounds_s([a, b, c, d], [c, d]) == pytest.approx([0.2, 0.1])
    # a request sent before any stream ended has no turnaround
    assert turnarounds_s([a, b, c, d], [a, b, c]) == pytest.approx([0.2])
