"""The engine thread (serve/loop.py) driving a pipelined engine: async scheduling with the captured
decode step (its bodies run eagerly on the CPU, `enforce_eager=False`), synthetic acceptance
length 4.0 at k = 8 (rates 1, 1, 1, 0, ...: every verify accepts exactly 3 drafts).

Pass criteria:
- requests stream to completion: each gets exactly max_tokens tokens, the last event is its
  only finished one ("length"), and the pipeline really ran (chained steps counted);
- a request submitted while steps are chained is served in full; a request aborted mid-stream
  gets no finished event and fewer tokens than it asked for;
- /metrics' snapshot: accepted per position is [V, V, V, 0, ...] with V = draft tokens / k and
  sums to the accepted tokens, though requests ran once more after they finished (dropped rows);
  generation tokens equal the tokens routed;
- stop() with steps in flight: the thread ends, every open request gets a final "abort" event,
  and the engine holds nothing (no launched step left unread).
Tiny shapes, seeded random weights, CPU.
"""

from __future__ import annotations

import queue
import random
import time

import pytest

from conformance import paths
from engine_under_test.llm import LLM, SamplingParams
from engine_under_test.serve.build import engine_stats
from engine_under_test.serve.loop import EngineLoop, ErrorEvent, TokenEvent

K = 8
TIMEOUT_S = 300.0


@pytest.fixture
def engine():
    """A fresh engine per test: one server's engine thread numbers its requests from cmpl-0."""
    spec = {"method": "dflash", "num_speculative_tokens": K, "model": str(paths.MODELS_DIR / "tiny-dflash"),
            "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 4.0}
    llm = LLM(paths.MODELS_DIR / "tiny-hybrid", spec, max_num_seqs=4, max_model_len=256,
              max_num_batched_tokens=256, kv_cache_memory_bytes=64 * 2**20, load_format="dummy",
              enforce_eager=False, async_scheduling=True)
    assert llm.engine.runner.can_pipeline
    return llm.engine


def _params(n: int) -> SamplingParams:
    return SamplingParams(max_tokens=n, temperature=0, ignore_eos=True)


def _prompt(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(2, 1000) for _ in range(n)]


def _events(q: queue.Queue, until_s: float) -> list:
    out = []
    while True:
        try:
            out.append(q.get(timeout=max(until_s - time.monotonic(), 0.01)))
        except queue.Empty:
            return out
        if isinstance(out[-1], ErrorEvent) or out[-1].finished:
            return out


def _drain(q: queue.Queue) -> list:
    out = []
    while not q.empty():
        out.append(q.get_nowait())
    return out


def _wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_streams_arrivals_aborts_and_counters_with_a_pipelined_engine(engine):
    loop = EngineLoop(engine, engine_stats)
    loop.start()
    rng = random.Random(1)
    try:
        lengths = {"a": 40, "b": 27, "c": 33}
        queues = {name: queue.Queue() for name in (*lengths, "late", "gone")}
        for name, n in lengths.items():
            loop.submit(_prompt(rng, 5 + n % 7), _params(n), queues[name], tag=name)
        gone_id = loop.submit(_prompt(rng, 9), _params(200), queues["gone"], tag="gone")
        graphs = engine.runner.graphs
        _wait_for(lambda: graphs.num_chained_steps >= 2, "chained steps")
        loop.submit(_prompt(rng, 11), _params(21), queues["late"], tag="late")     # arrives mid-pipeline
        first = queues["gone"].get(timeout=TIMEOUT_S)
        loop.abort(gone_id)
        chained_at_abort = graphs.num_chained_steps
        deadline = time.monotonic() + TIMEOUT_S
        streamed = {name: _events(queues[name], deadline) for name in (*lengths, "late")}
        for name, n in {**lengths, "late": 21}.items():
            evs = streamed[name]
            assert all(isinstance(e, TokenEvent) for e in evs), evs
            assert sum(len(e.token_ids) for e in evs) == n, name
            assert [e.finished for e in evs] == [False] * (len(evs) - 1) + [True]
            assert evs[-1].finish_reason == "length"
        gone = [first] + _drain(queues["gone"])
        assert not any(e.finished for e in gone) and sum(len(e.token_ids) for e in gone) < 200
        assert graphs.num_chained_steps > chained_at_abort
        routed = sum(len(e.token_ids) for evs in streamed.values() for e in evs) + sum(len(e.token_ids) for e in gone)
        _wait_for(lambda: loop.snapshot()["num_generation_tokens"] >= routed, "the last snapshot")
        snap = loop.snapshot()
        per_pos = [snap[f"accepted_per_pos:{i}"] for i in range(K)]
        verifies = snap["num_draft_tokens"] / K
        assert verifies > 10 and per_pos == [verifies] * 3 + [0] * (K - 3), (per_pos, verifies)
        assert sum(per_pos) == snap["num_accepted_tokens"]
        assert snap["num_generation_tokens"] == routed
    finally:
        loop.stop()
    assert not loop.thread.is_alive() and loop.fatal is None


def test_stop_with_steps_in_flight_aborts_and_reads_everything(engine):
    loop = EngineLoop(engine, engine_stats)
    loop.start()
    rng = random.Random(2)
    queues = [queue.Queue() for _ in range(3)]
    for i, q in enumerate(queues):
        loop.submit(_prompt(rng, 6 + i), _params(200), q, tag=i)
    before = engine.runner.graphs.num_chained_steps
    _wait_for(lambda: engine.runner.graphs.num_chained_steps >= before + 2 or not loop.alive, "chained steps")
    assert loop.alive, loop.fatal
    loop.stop(timeout_s=TIMEOUT_S)
    assert not loop.thread.is_alive() and loop.fatal is None
    assert not engine.has_unfinished_requests()
    for i, q in enumerate(queues):
        evs = _drain(q)
        assert evs and evs[-1] == TokenEvent(i, (), True, "abort"), evs[-3:]
        assert sum(len(e.token_ids) for e in evs) < 200
