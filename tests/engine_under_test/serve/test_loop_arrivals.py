"""Requests that arrive together at an idle engine are stepped together (serve/loop.py).

A wave of clients sends its requests at once; the HTTP thread hands them to the engine thread one
by one. The engine thread, woken by the first, used to step it alone at once: every other request
of the wave waited for that whole prefill step before its own (at c = 4 .. 32 on an H200 the
first request's TTFT was 45 - 90 ms and everyone else's one prefill step later). Now it waits
for the requests arriving within `arrival_gap_s` of each other before its first step.

Pass criteria (the real engine on the CPU, tiny shapes, seeded random weights): with a gap of
0.5 s, a second request submitted 0.1 s after the first is in the engine's first step, and both
complete with all their tokens; with a gap of 0 (no waiting) the first step holds the first
request alone (the same test's measurement can tell the two apart).
"""

from __future__ import annotations

import queue
import time

from conformance import paths
from engine_under_test.llm import LLM, SamplingParams
from engine_under_test.serve.build import engine_stats
from engine_under_test.serve.loop import EngineLoop, TokenEvent

TIMEOUT_S = 120.0
MAX_TOKENS = 3


class _Counting:
    """The engine, recording how many requests it holds at each step (what the loop sees of it
    is the engine's own)."""

    def __init__(self, engine):
        self._engine = engine
        self.requests_at_step: list[int] = []

    def step(self):
        sched = self._engine.scheduler
        self.requests_at_step.append(len(sched.waiting) + len(sched.running))
        return self._engine.step()

    def __getattr__(self, name):
        return getattr(self._engine, name)


def _engine():
    llm = LLM(paths.MODELS_DIR / "tiny-hybrid", None, max_num_seqs=4, max_model_len=128, max_num_batched_tokens=128,
              kv_cache_memory_bytes=32 * 2**20, load_format="dummy")
    return _Counting(llm.engine)


def _finish(q: queue.Queue) -> list[int]:
    tokens, deadline = [], time.monotonic() + TIMEOUT_S
    while True:
        ev = q.get(timeout=max(deadline - time.monotonic(), 0.01))
        assert isinstance(ev, TokenEvent), ev
        tokens += ev.token_ids
        if ev.finished:
            return tokens


def _first_step(arrival_gap_s: float) -> int:
    engine = _engine()
    loop = EngineLoop(engine, engine_stats, arrival_gap_s=arrival_gap_s, max_arrival_wait_s=2.0)
    loop.start()
    try:
        params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0, ignore_eos=True)
        qa, qb = queue.Queue(), queue.Queue()
        loop.submit(list(range(2, 40)), params, qa)
        time.sleep(0.1)
        loop.submit(list(range(5, 30)), params, qb)
        assert len(_finish(qa)) == MAX_TOKENS and len(_finish(qb)) == MAX_TOKENS
    finally:
        loop.stop()
    assert loop.fatal is None
    return engine.requests_at_step[0]


def test_requests_arriving_together_share_the_first_step():
    assert _first_step(arrival_gap_s=0.5) == 2


def test_without_waiting_the_first_request_is_stepped_alone():
    assert _first_step(arrival_gap_s=0.0) == 1
