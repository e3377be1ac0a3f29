"""HTTP endpoints (OpenAI shape) over `http.server.ThreadingHTTPServer`.

    POST /v1/completions  prompt: token ids (list of ints) or a list of such lists; max_tokens,
                          temperature, ignore_eos, seed, stream (SSE `data: {...}` chunks then
                          `data: [DONE]`), stream_options.include_usage. Each choice carries
                          `token_ids`; `text` is the ids written out (" 17 42"): shape dirs
                          ship no tokenizer.
    GET  /health          200 while the engine thread runs, 503 after it failed
    GET  /v1/models       the served model
    GET  /metrics         Prometheus text (see `metrics`)

Errors are OpenAI-style JSON `{"error": {"message", "type", "code"}}` with 400 / 404 / 503.
"""

from __future__ import annotations

import json
import queue
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from engine_under_test.serve import metrics
from engine_under_test.serve.loop import EngineLoop, ErrorEvent, TokenEvent

EVENT_POLL_S = 0.5


class RequestError(ValueError):
    pass


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256   # listen backlog: a ladder opens up to max concurrency connections at once
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], loop: EngineLoop, model_name: str,
                 make_params: Callable[[dict], Any], max_model_len: int, vocab_size: int):
        super().__init__(address, _Handler)
        self.loop, self.model_name, self.make_params = loop, model_name, make_params
        self.max_model_len, self.vocab_size = max_model_len, vocab_size

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up; the handler already aborted its requests


def _prompts(body: dict, vocab_size: int) -> list[list[int]]:
    p = body.get("prompt")
    if isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        prompts = [p]
    elif isinstance(p, list) and p and all(isinstance(x, list) and x for x in p):
        prompts = p
    else:
        raise RequestError("prompt: must be a non-empty list of token ids or a list of such lists "
                           "(this server has no tokenizer)")
    for i, ids in enumerate(prompts):
        bad = [t for t in ids if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab_size]
        if bad:
            raise RequestError(f"prompt[{i}]: token ids must be integers in [0, {vocab_size}), got {bad[0]!r}")
    return prompts


def _text(ids: tuple[int, ...]) -> str:
    return "".join(f" {t}" for t in ids)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True   # SSE chunks are small: no Nagle / delayed-ACK stalls
    server: ApiServer

    def log_message(self, *args: Any) -> None:
        pass

    def _json(self, code: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, code: int, message: str, kind: str = "invalid_request_error") -> None:
        self._json(code, {"error": {"message": message, "type": kind, "code": code}})

    def do_GET(self) -> None:
        srv = self.server
        if self.path == "/health":
            self.send_response(200 if srv.loop.alive else 503)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": srv.model_name, "object": "model", "owned_by": "reference",
                                                          "max_model_len": srv.max_model_len}]})
        elif self.path == "/metrics":
            data = metrics.render(srv.loop.snapshot()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._error(404, f"no route GET {self.path}", "not_found")

    def do_POST(self) -> None:
        srv = self.server
        if self.path != "/v1/completions":
            self._error(404, f"no route POST {self.path}", "not_found")
            return
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if not isinstance(body, dict):
                raise RequestError("body: must be a JSON object")
            prompts = _prompts(body, srv.vocab_size)
            params = srv.make_params(body)
            longest = max(map(len, prompts))
            if longest + params.max_tokens > srv.max_model_len:
                raise RequestError(f"this model's maximum context length is {srv.max_model_len} tokens; the request "
                                   f"asks for {longest} prompt + {params.max_tokens} output tokens")
        except (RequestError, ValueError, TypeError) as exc:
            self._error(400, str(exc))
            return
        if not srv.loop.alive:
            self._error(503, "engine is not running", "server_error")
            return
        out: queue.Queue = queue.Queue()
        ids = [srv.loop.submit(p, params, out, tag=i) for i, p in enumerate(prompts)]
        created = int(time.time())
        head = {"id": ids[0], "object": "text_completion", "created": created, "model": srv.model_name}
        try:
            if body.get("stream"):
                self._stream(out, len(prompts), head, sum(map(len, prompts)),
                             bool((body.get("stream_options") or {}).get("include_usage")))
            else:
                self._collect(out, len(prompts), head, sum(map(len, prompts)))
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            for rid in ids:
                srv.loop.abort(rid)   # no-op for finished requests

    def _events(self, out: queue.Queue, num_choices: int):
        pending = num_choices
        while pending:
            try:
                ev = out.get(timeout=EVENT_POLL_S)
            except queue.Empty:
                if not self.server.loop.alive:
                    yield ErrorEvent(None, "engine is not running")
                    return
                continue
            if isinstance(ev, ErrorEvent) or ev.finished:
                pending -= 1
            yield ev

    def _collect(self, out: queue.Queue, n: int, head: dict, num_prompt_tokens: int) -> None:
        tokens: dict[int, list[int]] = {i: [] for i in range(n)}
        reasons: dict[int, str | None] = {}
        for ev in self._events(out, n):
            if isinstance(ev, ErrorEvent):
                self._error(400 if ev.tag is not None else 503, ev.message)
                return
            tokens[ev.tag] += ev.token_ids
            if ev.finished:
                reasons[ev.tag] = ev.finish_reason
        num_out = sum(map(len, tokens.values()))
        self._json(200, {**head, "choices": [{"index": i, "text": _text(tuple(t)), "token_ids": t,
                                              "logprobs": None, "finish_reason": reasons.get(i)}
                                             for i, t in tokens.items()],
                         "usage": {"prompt_tokens": num_prompt_tokens, "completion_tokens": num_out,
                                   "total_tokens": num_prompt_tokens + num_out}})

    def _stream(self, out: queue.Queue, n: int, head: dict, num_prompt_tokens: int, include_usage: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        num_out = 0
        for ev in self._events(out, n):
            if isinstance(ev, ErrorEvent):
                self._sse({"error": {"message": ev.message, "type": "server_error", "code": 500}})
                break
            num_out += len(ev.token_ids)
            self._sse({**head, "choices": [{"index": ev.tag, "text": _text(ev.token_ids), "token_ids": list(ev.token_ids),
                                            "logprobs": None, "finish_reason": ev.finish_reason}]})
        else:
            if include_usage:
                self._sse({**head, "choices": [], "usage": {"prompt_tokens": num_prompt_tokens, "completion_tokens": num_out,
                                                            "total_tokens": num_prompt_tokens + num_out}})
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _sse(self, obj: dict) -> None:
        self._chunk(f"data: {json.dumps(obj)}\n\n".encode())

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()
