"""The engine thread: the only thread that touches the engine.

Contract: handler threads call `submit(...)` / `abort(...)` (thread-safe; they only enqueue) and
read events from the queue they passed in: `TokenEvent(tag, token_ids, finished, finish_reason)`
as the engine produces tokens, or `ErrorEvent(tag, message)` when the request cannot go on. The
engine thread drains its inbox, runs `engine.step()` while anything is unfinished, and routes
each output to its request's queue. `snapshot()` returns the latest counters for /metrics
(replaced whole after each step, never mutated in place). If `step()` raises, every request in
flight gets an `ErrorEvent`, `fatal` holds the traceback and the thread ends (the server then
reports unhealthy and exits). A request the engine refuses at `add_request` (any exception)
gets an `ErrorEvent` of its own; the thread goes on.

Arrivals at an idle engine: the thread blocks while nothing is unfinished; woken by a request, it
keeps taking requests until none has arrived for `arrival_gap_s` (at most `max_arrival_wait_s`
in all) and only then steps, so requests sent together (a wave of clients; the HTTP thread hands
them over one by one) are prefilled together rather than the first one alone while the rest
wait for its whole step. A busy engine takes whatever has arrived before each step, no waiting.

A pipelined engine (async scheduling, engine.py) may return no outputs from a `step()` that
launched a step on the device, and stays unfinished while a launched step is unread
(`has_unfinished_requests`); its outputs come with the next call. The loop keeps stepping while
the engine is unfinished, so those outputs follow at once; a submit or an abort handled between
two calls is the engine's to order (an arrival ends the pipeline for a step; an aborted
request's rows in flight are dropped). On `stop()` the thread aborts every request still open
(each gets a final `TokenEvent` with finish_reason "abort") and steps the engine until it holds
nothing, so no launched step is left unread when the thread ends.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
import traceback
from typing import Any, Callable, NamedTuple

IDLE_WAIT_S = 0.05
MAX_SHUTDOWN_STEPS = 8     # steps to read what is in flight once every request is aborted
# An idle engine thread woken by a request waits for the requests arriving with it before its
# first step: until no other arrives for ARRIVAL_GAP_S, at most MAX_ARRIVAL_WAIT_S in all.
ARRIVAL_GAP_S = 0.001
MAX_ARRIVAL_WAIT_S = 0.01


class TokenEvent(NamedTuple):
    tag: Any
    token_ids: tuple[int, ...]
    finished: bool
    finish_reason: str | None


class ErrorEvent(NamedTuple):
    tag: Any
    message: str


class _Submit(NamedTuple):
    request_id: str
    prompt_token_ids: list[int]
    sampling_params: Any
    out: "queue.Queue[TokenEvent | ErrorEvent]"
    tag: Any


class _Abort(NamedTuple):
    request_id: str


def _get(obj: Any, name: str, default: Any = None) -> Any:
    return obj.get(name, default) if isinstance(obj, dict) else getattr(obj, name, default)


class EngineLoop:
    def __init__(self, engine: Any, stats_fn: Callable[[Any], dict[str, float]],
                 arrival_gap_s: float = ARRIVAL_GAP_S, max_arrival_wait_s: float = MAX_ARRIVAL_WAIT_S):
        self._engine = engine
        self._stats_fn = stats_fn
        self._arrival_gap_s = arrival_gap_s
        self._max_arrival_wait_s = max_arrival_wait_s
        self._inbox: "queue.Queue[_Submit | _Abort | None]" = queue.Queue()
        self._streams: dict[str, _Submit] = {}           # engine thread only
        self._ids = itertools.count()
        self._stop = threading.Event()
        self._counters: dict[str, float] = {"num_requests": 0, "num_prompt_tokens": 0, "num_generation_tokens": 0}
        self._snapshot: dict[str, float] = dict(self._counters)
        self.fatal: str | None = None
        self.thread = threading.Thread(target=self._run, name="engine", daemon=True)

    # -- handler side -------------------------------------------------------------------------
    def submit(self, prompt_token_ids: list[int], sampling_params: Any, out: "queue.Queue", tag: Any = 0) -> str:
        request_id = f"cmpl-{next(self._ids)}"
        self._inbox.put(_Submit(request_id, list(prompt_token_ids), sampling_params, out, tag))
        return request_id

    def abort(self, request_id: str) -> None:
        self._inbox.put(_Abort(request_id))

    def snapshot(self) -> dict[str, float]:
        return self._snapshot

    @property
    def alive(self) -> bool:
        return self.thread.is_alive() and self.fatal is None

    def start(self) -> None:
        self._snapshot = self._make_snapshot()
        self.thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._inbox.put(None)
        self.thread.join(timeout=timeout_s)

    # -- engine thread ------------------------------------------------------------------------
    def _handle(self, item: "_Submit | _Abort | None") -> None:
        if item is None:
            return
        if isinstance(item, _Abort):
            if self._streams.pop(item.request_id, None) is not None:
                self._engine.abort_request(item.request_id)
            return
        try:
            self._engine.add_request(item.request_id, item.prompt_token_ids, item.sampling_params)
        except Exception as exc:  # noqa: BLE001  the engine refuses this request: it alone fails
            item.out.put(ErrorEvent(item.tag, f"{type(exc).__name__}: {exc}" if not isinstance(exc, ValueError)
                                    else str(exc)))
            try:
                self._engine.abort_request(item.request_id)   # whatever add_request left behind
            except Exception:  # noqa: BLE001
                pass
            return
        self._streams[item.request_id] = item
        self._counters["num_requests"] += 1
        self._counters["num_prompt_tokens"] += len(item.prompt_token_ids)

    def _drain(self, block: bool) -> None:
        """Handle what the inbox holds; `block` (the engine is idle): wait for the first item, and
        after a request, for the requests arriving with it (see the module docstring)."""
        try:
            item = self._inbox.get(timeout=IDLE_WAIT_S) if block else self._inbox.get_nowait()
        except queue.Empty:
            return
        self._handle(item)
        gather = block and isinstance(item, _Submit)
        deadline = time.monotonic() + self._max_arrival_wait_s
        while item is not None:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                left = deadline - time.monotonic()
                if not gather or left <= 0:
                    return
                try:
                    item = self._inbox.get(timeout=min(self._arrival_gap_s, left))
                except queue.Empty:
                    return
            self._handle(item)

    def _route(self, outputs: Any) -> None:
        for out in outputs or ():
            rid = _get(out, "request_id")
            sub = self._streams.get(rid)
            if sub is None:
                continue  # aborted meanwhile
            ids = tuple(int(t) for t in (_get(out, "new_token_ids") or ()))
            finished = bool(_get(out, "finished", False))
            reason = _get(out, "finish_reason") or ("length" if finished else None)
            self._counters["num_generation_tokens"] += len(ids)
            if finished:
                del self._streams[rid]
                key = f"finished:{reason}"
                self._counters[key] = self._counters.get(key, 0) + 1
            if ids or finished:
                sub.out.put(TokenEvent(sub.tag, ids, finished, reason if finished else None))

    def _make_snapshot(self) -> dict[str, float]:
        snap = dict(self._stats_fn(self._engine))
        snap.update(self._counters)
        return snap

    def _close(self) -> None:
        """Stopping: abort every open request (a final "abort" event each), then step the engine
        until nothing is unfinished: a pipelined engine's launched step is read, not left behind."""
        for rid, sub in list(self._streams.items()):
            self._engine.abort_request(rid)
            sub.out.put(TokenEvent(sub.tag, (), True, "abort"))
        self._streams.clear()
        for _ in range(MAX_SHUTDOWN_STEPS):
            if not self._engine.has_unfinished_requests():
                break
            self._engine.step()
        self._snapshot = self._make_snapshot()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                busy = self._engine.has_unfinished_requests()
                self._drain(block=not busy)
                if self._engine.has_unfinished_requests():
                    self._route(self._engine.step())
                    self._snapshot = self._make_snapshot()
                elif not busy:
                    self._snapshot = self._make_snapshot()
            self._close()
        except Exception:
            self.fatal = traceback.format_exc()
            for sub in self._streams.values():
                sub.out.put(ErrorEvent(sub.tag, "engine failed: " + self.fatal.strip().splitlines()[-1]))
            self._streams.clear()
            print(f"reference-engine error: engine thread failed\n{self.fatal}", flush=True)
