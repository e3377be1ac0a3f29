"""A minimal OpenAI-compatible streaming server for measuring and testing the harness.

It is a checking system under test (MLPerf LoadGen style): it serves POST /v1/completions (and
SGLang's native POST /generate, token ids in and cumulative `output_ids` out) with SSE, emitting `max_tokens` tokens in chunks of `tokens_per_step` as fast as it can (or with
`step_delay_s` between chunks, and `first_token_delay_s` before the first: an engine's prefill, so
a benchmark can give it the TTFT of a real engine while its answers stay exactly paced), and
records what the harness did: requests seen, the most requests in flight at once, bodies that
broke the contract (`violations`), the prompts. Its /metrics counts one draft of
`num_speculative_tokens` per chunk with `tokens_per_step - 1` of them accepted (positions 0 ..
tokens_per_step - 2, as vLLM's per-position counter labels them), so the mean acceptance length a
client derives is `tokens_per_step`, and the requests in flight as its running-requests gauge.
`max_output_tokens` makes it a defective server that stops early (ignores `ignore_eos`); `max_running`
one short of seats (requests beyond it wait, not counted as running, until one finishes).

It must never be the bottleneck of the benchmark that measures the client, so it is an
`asyncio.Protocol` on one event loop (uvloop when installed), with every response pre-rendered
as HTTP chunked SSE bytes and cached per (prompt length, max_tokens): a request costs one JSON
parse of its body and one `transport.write` per step (a single write when `step_delay_s` is 0).
GET /stub/state returns its counters and the CPU seconds it has used, from which a benchmark
derives the stub's own ceiling (requests per CPU second of its one core).

    with StubServer(tokens_per_step=3) as srv: ... srv.base_url ... srv.state.num_requests
    python -m conformance.loadgen.stub_server --cpu 0     # its own process; prints "port N"
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

from conformance.loadgen.event_loop import new_event_loop

MODEL_ID = "stub"
MAX_CACHED_RESPONSES = 4096


@dataclass
class StubState:
    num_requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    violations: list[str] = field(default_factory=list)
    prompts: list[list[int]] = field(default_factory=list)
    record_prompts: bool = True

    def summary(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("prompts")
        d["cpu_s"] = time.process_time()
        return d


@dataclass(frozen=True)
class StubConfig:
    tokens_per_step: int = 1
    num_speculative_tokens: int = 4
    step_delay_s: float = 0.0
    max_output_tokens: int | None = None
    first_token_delay_s: float = 0.0
    max_running: int = 0      # > 0: at most this many requests run at once, the rest wait (an engine short of seats)

    def __post_init__(self) -> None:
        if not 1 <= self.tokens_per_step <= self.num_speculative_tokens + 1:
            raise ValueError("tokens_per_step: must be in [1, num_speculative_tokens + 1]")
        if self.step_delay_s < 0:
            raise ValueError("step_delay_s: must be >= 0")
        if self.first_token_delay_s < 0:
            raise ValueError("first_token_delay_s: must be >= 0")
        if self.max_running < 0:
            raise ValueError("max_running: must be >= 0 (0: no cap)")


def _http_chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _sse(obj: dict) -> bytes:
    return _http_chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


def _response(head: bytes, body: bytes, ctype: bytes) -> bytes:
    return (b"HTTP/1.1 " + head + b"\r\nContent-Type: " + ctype + b"\r\nContent-Length: %d\r\n\r\n" % len(body)
            + body)


STREAM_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def render_stream(cfg: StubConfig, max_tokens: int, prompt_len: int, native: bool = False) -> list[bytes]:
    """The response as a list of writes: head + first step, each further step, usage + [DONE] + end.
    `native`: SGLang's /generate events (cumulative `output_ids`, the counts in `meta_info`, no usage event)."""
    n_out = max_tokens if cfg.max_output_tokens is None else min(max_tokens, cfg.max_output_tokens)
    steps: list[bytes] = []
    remaining = n_out
    while remaining > 0:
        n = min(cfg.tokens_per_step, remaining)
        remaining -= n
        if native:
            done = n_out - remaining
            steps.append(_sse({"output_ids": [7] * done, "meta_info": {
                "id": "stub", "prompt_tokens": prompt_len, "completion_tokens": done,
                "finish_reason": None if remaining else {"type": "length", "length": n_out}}}))
            continue
        steps.append(_sse({"object": "text_completion", "model": MODEL_ID, "choices": [
            {"index": 0, "text": "x" * n, "finish_reason": None if remaining else "length"}]}))
    usage = b"" if native else _sse({"object": "text_completion", "model": MODEL_ID, "choices": [],
                                     "usage": {"prompt_tokens": prompt_len, "completion_tokens": n_out,
                                               "total_tokens": prompt_len + n_out}})
    tail = usage + _http_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    if not steps:
        return [STREAM_HEAD + tail]
    writes = [STREAM_HEAD + steps[0], *steps[1:]]
    writes[-1] += tail
    return writes


class _Protocol(asyncio.Protocol):
    """HTTP/1.1 keep-alive, Content-Length bodies only (what every client here sends)."""

    def __init__(self, server: "_Core") -> None:
        self.server, self.buf, self.transport = server, b"", None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end]
            length = 0
            i = head.lower().find(b"content-length:")
            if i >= 0:
                j = head.find(b"\r\n", i)
                length = int(head[i + 15:j if j > 0 else len(head)])
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4:end + 4 + length]
            self.buf = self.buf[end + 4 + length:]
            method, _, rest = head.partition(b" ")
            path = rest.partition(b" ")[0]
            self.server.handle(self.transport, method, path, body)


class _Core:
    def __init__(self, cfg: StubConfig, state: StubState) -> None:
        self.cfg, self.state = cfg, state
        self.cache: dict[tuple[int, int, bool], list[bytes]] = {}
        self.waiting: deque[tuple[Any, list[bytes]]] = deque()   # requests without a seat (max_running), in arrival order
        self.loop: asyncio.AbstractEventLoop | None = None

    def handle(self, tr: Any, method: bytes, path: bytes, body: bytes) -> None:
        st = self.state
        if method == b"POST" and path == b"/v1/completions":
            self.completion(tr, body)
        elif method == b"POST" and path == b"/generate":
            self.completion(tr, body, native=True)
        elif path == b"/health":
            tr.write(_response(b"200 OK", b"", b"text/plain"))
        elif path == b"/v1/models":
            tr.write(_response(b"200 OK", json.dumps({"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]})
                               .encode(), b"application/json"))
        elif path == b"/metrics":
            accepted_per_draft = self.cfg.tokens_per_step - 1   # positions 0 .. tokens_per_step - 2 of each draft
            per_pos = "".join(f'stub:num_accepted_tokens_per_pos_total{{position="{i}"}} '
                              f'{st.num_drafts if i < accepted_per_draft else 0}\n'
                              for i in range(self.cfg.num_speculative_tokens))
            text = (f"stub:num_drafts_total {st.num_drafts}\nstub:num_draft_tokens_total {st.num_draft_tokens}\n"
                    f"stub:num_accepted_tokens_total {st.num_accepted_tokens}\n{per_pos}"
                    f"stub:num_requests_running {st.in_flight}\n")
            tr.write(_response(b"200 OK", text.encode(), b"text/plain; version=0.0.4"))
        elif path == b"/stub/state":
            tr.write(_response(b"200 OK", json.dumps(st.summary()).encode(), b"application/json"))
        else:
            tr.write(_response(b"404 Not Found", b"not found", b"text/plain"))

    def completion(self, tr: Any, raw: bytes, native: bool = False) -> None:
        """/v1/completions, or SGLang's /generate (`native`: `input_ids`, `sampling_params`)."""
        st, cfg = self.state, self.cfg
        try:
            body = json.loads(raw)
            params = body["sampling_params"] if native else body
            max_tokens = int(params["max_new_tokens" if native else "max_tokens"])
        except (ValueError, KeyError, TypeError) as exc:
            tr.write(_response(b"400 Bad Request", f"bad body: {exc}".encode(), b"text/plain"))
            return
        prompt = body.get("input_ids" if native else "prompt")
        st.num_requests += 1
        if st.record_prompts:
            st.prompts.append(list(prompt) if isinstance(prompt, list) else [])
        if not body.get("stream") or not params.get("ignore_eos") or not isinstance(prompt, list):
            st.violations.append(f"body without stream/ignore_eos/token prompt: {sorted(body)}")
        key = (len(prompt) if isinstance(prompt, (list, str)) else 0, max_tokens, native)
        writes = self.cache.get(key)
        if writes is None:
            writes = render_stream(cfg, max_tokens, key[0], native)
            if len(self.cache) < MAX_CACHED_RESPONSES:
                self.cache[key] = writes
        if cfg.max_running and st.in_flight >= cfg.max_running:
            self.waiting.append((tr, writes))   # no seat: it waits, not running, until one finishes
            return
        self.admit(tr, writes)

    def admit(self, tr: Any, writes: list[bytes]) -> None:
        """A request takes a seat: it runs (the running-requests gauge counts it) from its prefill on."""
        st, cfg = self.state, self.cfg
        st.in_flight += 1
        st.max_in_flight = max(st.max_in_flight, st.in_flight)
        if cfg.first_token_delay_s > 0:
            due = time.perf_counter() + cfg.first_token_delay_s
            self.loop.call_later(cfg.first_token_delay_s, self._start_when_due, tr, writes, due)
        else:
            self.start(tr, writes)

    def _start_when_due(self, tr: Any, writes: list[bytes], due: float) -> None:
        """The first chunk never before `due`: a loop timer may fire up to a millisecond early
        (uvloop counts from the time its iteration began, in whole milliseconds)."""
        left = due - time.perf_counter()
        if left > 0:
            self.loop.call_later(left, self._start_when_due, tr, writes, due)
        else:
            self.start(tr, writes)

    def start(self, tr: Any, writes: list[bytes]) -> None:
        """The response from its first step on: at once when there is no step delay, else paced."""
        if self.cfg.step_delay_s > 0:
            self.step(tr, writes, 0)
        elif tr.is_closing():
            self.finish(0)
        else:
            tr.write(b"".join(writes))
            self.finish(len(writes))

    def step(self, tr: Any, writes: list[bytes], i: int) -> None:
        if tr.is_closing():
            self.finish(i)
            return
        tr.write(writes[i])
        if i + 1 == len(writes):
            self.finish(len(writes))
        else:
            self.loop.call_later(self.cfg.step_delay_s, self.step, tr, writes, i + 1)

    def finish(self, num_steps: int) -> None:
        st, cfg = self.state, self.cfg
        st.in_flight -= 1
        st.num_drafts += num_steps
        st.num_draft_tokens += num_steps * cfg.num_speculative_tokens
        st.num_accepted_tokens += num_steps * (cfg.tokens_per_step - 1)
        while self.waiting and (not cfg.max_running or st.in_flight < cfg.max_running):
            tr, writes = self.waiting.popleft()
            if tr.is_closing():
                continue
            self.admit(tr, writes)


class StubServer:
    """The stub on its own event loop in a daemon thread of this process (tests); see the module doc."""

    def __init__(self, tokens_per_step: int = 1, num_speculative_tokens: int = 4, step_delay_s: float = 0.0,
                 max_output_tokens: int | None = None, port: int = 0, first_token_delay_s: float = 0.0,
                 max_running: int = 0) -> None:
        self.config = StubConfig(tokens_per_step, num_speculative_tokens, step_delay_s, max_output_tokens,
                                 first_token_delay_s, max_running)
        self.state = StubState()
        self._core = _Core(self.config, self.state)
        self._sock = socket.create_server(("127.0.0.1", port), backlog=4096)
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="stub-server")
        self._server: asyncio.AbstractServer | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def _serve(self) -> None:
        loop = new_event_loop()
        self._core.loop = loop
        self._server = loop.run_until_complete(loop.create_server(lambda: _Protocol(self._core), sock=self._sock))
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            self._server.close()
            loop.run_until_complete(self._server.wait_closed())
            loop.close()

    def __enter__(self) -> "StubServer":
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: Any) -> None:
        loop = self._core.loop
        if loop is not None and self._server is not None:
            loop.call_soon_threadsafe(self._close_all)
        self._thread.join(timeout=5)

    def _close_all(self) -> None:
        self._server.close()
        if hasattr(self._server, "close_clients"):
            self._server.close_clients()
        self._core.loop.stop()


def main() -> int:
    """Serve in this process until killed; prints `port N` once listening (for `stub_process`)."""
    ap = argparse.ArgumentParser(description="the loadgen stub server in its own process")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--tokens-per-step", type=int, default=1)
    ap.add_argument("--num-speculative-tokens", type=int, default=4)
    ap.add_argument("--step-delay-s", type=float, default=0.0)
    ap.add_argument("--first-token-delay-s", type=float, default=0.0, help="before the first step (a prefill)")
    ap.add_argument("--max-running", type=int, default=0,
                    help="at most this many requests run at once, the rest wait (0: no cap; an engine short of seats)")
    ap.add_argument("--cpu", type=int, default=None, help="pin this process to one CPU")
    ap.add_argument("--resident-bytes", type=int, default=0,
                    help="hold this many bytes resident while serving (a store an engine keeps beside its pool)")
    a = ap.parse_args()
    held = bytearray(a.resident_bytes)          # NOTE: zero-filled by the allocator; touch every page so it is resident
    for i in range(0, len(held), 4096):
        held[i] = 1
    if a.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {a.cpu})
    cfg = StubConfig(a.tokens_per_step, a.num_speculative_tokens, a.step_delay_s,
                     first_token_delay_s=a.first_token_delay_s, max_running=a.max_running)
    core = _Core(cfg, StubState(record_prompts=False))
    loop = new_event_loop()
    core.loop = loop
    sock = socket.create_server(("127.0.0.1", a.port), backlog=4096)
    server = loop.run_until_complete(loop.create_server(lambda: _Protocol(core), sock=sock))
    print(f"port {sock.getsockname()[1]}" + (f" holding {len(held)} bytes" if held else ""), flush=True)
    try:
        loop.run_forever()
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
