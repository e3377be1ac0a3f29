"""A minimal OpenAI-compatible streaming server (standard library only) for testing the harness.

It is a checking system under test (MLPerf LoadGen style): it serves POST /v1/completions with
SSE, emitting `max_tokens` tokens in chunks of `tokens_per_step` as fast as it can (or with
`step_delay_s` between chunks), and records what the harness did: requests seen, the most
requests in flight at once, bodies that broke the contract (`violations`). Its /metrics counts
one draft of `num_speculative_tokens` per chunk with `tokens_per_step - 1` of them accepted, so
the mean acceptance length a client derives is `tokens_per_step`.

    with StubServer(tokens_per_step=3) as srv: ... srv.base_url ...
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL_ID = "stub"


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.num_requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.num_drafts = 0
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0
        self.violations: list[str] = []
        self.prompts: list[list[int]] = []


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True   # SSE chunks are small: no Nagle / delayed-ACK stalls
    server: "_HTTPServer"

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        st = self.server.state
        if self.path == "/health":
            self._send(200, b"", "text/plain")
        elif self.path == "/v1/models":
            self._send(200, json.dumps({"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]}).encode(),
                       "application/json")
        elif self.path == "/metrics":
            with st.lock:
                text = (f"stub:num_drafts_total {st.num_drafts}\n"
                        f"stub:num_draft_tokens_total {st.num_draft_tokens}\n"
                        f"stub:num_accepted_tokens_total {st.num_accepted_tokens}\n")
            self._send(200, text.encode(), "text/plain; version=0.0.4")
        else:
            self._send(404, b"not found", "text/plain")

    def do_POST(self) -> None:
        srv, st = self.server, self.server.state
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        with st.lock:
            st.num_requests += 1
            st.in_flight += 1
            st.max_in_flight = max(st.max_in_flight, st.in_flight)
            st.prompts.append(list(body.get("prompt") or []))
            if not body.get("stream") or not body.get("ignore_eos") or not isinstance(body.get("prompt"), list):
                st.violations.append(f"body without stream/ignore_eos/token prompt: {sorted(body)}")
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            remaining = int(body["max_tokens"])
            while remaining > 0:
                n = min(srv.tokens_per_step, remaining)
                remaining -= n
                with st.lock:
                    st.num_drafts += 1
                    st.num_draft_tokens += srv.num_speculative_tokens
                    st.num_accepted_tokens += srv.tokens_per_step - 1
                self._chunk({"object": "text_completion", "model": MODEL_ID,
                             "choices": [{"index": 0, "text": "x" * n, "finish_reason": None if remaining else "length"}]})
                if srv.step_delay_s:
                    time.sleep(srv.step_delay_s)
            prompt_len = len(body.get("prompt") or [])
            self._chunk({"object": "text_completion", "model": MODEL_ID, "choices": [],
                         "usage": {"prompt_tokens": prompt_len, "completion_tokens": int(body["max_tokens"]),
                                   "total_tokens": prompt_len + int(body["max_tokens"])}})
            self._raw(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
        finally:
            with st.lock:
                st.in_flight -= 1

    def _chunk(self, obj: dict) -> None:
        self._raw(f"data: {json.dumps(obj)}\n\n".encode())

    def _raw(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256   # listen backlog: a ladder opens up to max concurrency connections at once
    state: _State
    tokens_per_step: int
    num_speculative_tokens: int
    step_delay_s: float

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away mid-stream is the harness's business, not a server fault


class StubServer:
    def __init__(self, tokens_per_step: int = 1, num_speculative_tokens: int = 4, step_delay_s: float = 0.0):
        if not 1 <= tokens_per_step <= num_speculative_tokens + 1:
            raise ValueError("tokens_per_step: must be in [1, num_speculative_tokens + 1]")
        self.httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.state = _State()
        self.httpd.tokens_per_step = tokens_per_step
        self.httpd.num_speculative_tokens = num_speculative_tokens
        self.httpd.step_delay_s = step_delay_s
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def state(self) -> _State:
        return self.httpd.state

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> "StubServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
