"""HTTP endpoints (OpenAI shape) on aiohttp's low-level server: one asyncio event loop in the
main thread, the engine in its own thread (`loop.EngineLoop`), events handed over with
`call_soon_threadsafe`.

    POST /v1/completions  body checked field by field (`request.parse_completion`); each choice
                          carries `token_ids`; `text` is the ids written out (" 17 42"): shape
                          dirs ship no tokenizer. stream: SSE `data: {...}` chunks then
                          `data: [DONE]`; stream_options.include_usage adds a usage chunk.
    GET  /health          200 while the engine thread runs, 503 after it failed
    GET  /v1/models       the served model
    GET  /metrics         Prometheus text (see `metrics`)

Every error is OpenAI-style JSON `{"error": {"message", "type", "param", "code"}}`: 400 for a
bad field, 404 for an unknown route or model, 413 for a body over MAX_BODY_BYTES, 408 when the
body does not arrive within BODY_TIMEOUT_S, 503 when the engine thread is gone; bytes that are
not HTTP (garbage, Content-Length with Transfer-Encoding, a negative Content-Length) get a JSON
400 from the protocol layer and the connection is closed. Connections idle for
KEEPALIVE_TIMEOUT_S are closed; a client that stops reading costs a coroutine, not a thread. A
client that disconnects has its requests aborted in the engine at once (streamed or not: the
handler is cancelled and aborts them); a body that asks for more than `request.MAX_PROMPTS_PER_REQUEST`
prompts or `request.MAX_TOKENS_PER_REQUEST` tokens is a 400 naming the limit.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from engine_under_test.serve import metrics
from engine_under_test.serve.loop import EngineLoop, ErrorEvent
from engine_under_test.serve.request import RequestError, parse_completion

MAX_BODY_BYTES = 8 * 2**20          # a 1M-token batch of prompts is ~7 MB of JSON
BODY_TIMEOUT_S = 30.0
KEEPALIVE_TIMEOUT_S = 30.0
HEALTH_POLL_S = 0.5


def _error_body(status: int, message: str, kind: str, param: str | None = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "param": param, "code": status}}).encode()


def _error(status: int, message: str, kind: str = "invalid_request_error", param: str | None = None) -> web.Response:
    return web.Response(status=status, body=_error_body(status, message, kind, param), content_type="application/json")


class _JsonErrorHandler(RequestHandler):
    """The protocol layer's own errors (unparsable requests) as OpenAI-style JSON."""

    def handle_error(self, request, status: int = 500, exc: BaseException | None = None, message: str | None = None):
        text = str(getattr(exc, "message", None) or exc or message or "bad request")
        resp = _error(status, f"malformed HTTP request: {text}", "invalid_request_error" if status < 500 else "server_error")
        resp.force_close()                 # the byte stream cannot be trusted past this point
        return resp


class _Server(web.Server):
    def __call__(self) -> RequestHandler:
        return _JsonErrorHandler(self, loop=self._loop, **self._kwargs)


class _Events:
    """A thread-safe `put` into an asyncio queue (the engine thread calls it)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop, self.queue = loop, asyncio.Queue()

    def put(self, ev: Any) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, ev)


def _text(ids) -> str:
    return "".join(f" {t}" for t in ids)


class ApiServer:
    def __init__(self, loop: EngineLoop, model_name: str, max_model_len: int, vocab_size: int):
        self.loop, self.model_name = loop, model_name
        self.max_model_len, self.vocab_size = max_model_len, vocab_size

    def make_server(self) -> web.Server:
        def request_factory(message, payload, protocol, writer, task):
            return BaseRequest(message, payload, protocol, writer, task, asyncio.get_running_loop(),
                               client_max_size=MAX_BODY_BYTES)
        # handler_cancellation: a client that hangs up cancels its handler, whose `finally` aborts its
        # requests in the engine (streamed or not: a non-streamed handler writes nothing until the end)
        return _Server(self.dispatch, request_factory=request_factory, keepalive_timeout=KEEPALIVE_TIMEOUT_S,
                       access_log=None, handler_cancellation=True)

    async def dispatch(self, request: BaseRequest) -> web.StreamResponse:
        try:
            if request.method == "GET" and request.path == "/health":
                return web.Response(status=200 if self.loop.alive else 503)
            if request.method == "GET" and request.path == "/v1/models":
                return web.json_response({"object": "list", "data": [{"id": self.model_name, "object": "model",
                                                                       "owned_by": "reference",
                                                                       "max_model_len": self.max_model_len}]})
            if request.method == "GET" and request.path == "/metrics":
                return web.Response(text=metrics.render(self.loop.snapshot()),
                                    content_type="text/plain", charset="utf-8",
                                    headers={"X-Prometheus-Format": "0.0.4"})
            if request.method == "POST" and request.path == "/v1/completions":
                return await self.completions(request)
            return _error(404, f"no route {request.method} {request.path}", "not_found")
        except RequestError as exc:
            return _error(exc.status, str(exc), exc.kind, exc.param)

    async def _body(self, request: BaseRequest) -> Any:
        try:
            raw = await asyncio.wait_for(request.read(), BODY_TIMEOUT_S)
        except web.HTTPRequestEntityTooLarge:
            raise RequestError(f"body: larger than {MAX_BODY_BYTES} bytes", status=413) from None
        except asyncio.TimeoutError:
            raise RequestError(f"body: not received within {BODY_TIMEOUT_S:g} s", status=408) from None
        try:
            return json.loads(raw or b"{}")
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RequestError(f"body: not valid JSON ({exc})") from None
        except RecursionError:
            raise RequestError("body: JSON nested too deeply") from None

    async def completions(self, request: BaseRequest) -> web.StreamResponse:
        req = parse_completion(await self._body(request), self.model_name, self.vocab_size, self.max_model_len)
        if not self.loop.alive:
            return _error(503, "engine is not running", "server_error")
        events = _Events(asyncio.get_running_loop())
        ids = [self.loop.submit(p, req.params, events, tag=i) for i, p in enumerate(req.prompts)]
        head = {"id": ids[0], "object": "text_completion", "created": int(time.time()), "model": self.model_name}
        num_prompt = sum(map(len, req.prompts))
        try:
            if req.stream:
                return await self._stream(request, events, len(req.prompts), head, num_prompt, req.include_usage)
            return await self._collect(events, len(req.prompts), head, num_prompt)
        finally:
            for rid in ids:
                self.loop.abort(rid)   # no-op for finished requests; frees a client that hung up

    async def _events(self, events: _Events, num_choices: int):
        pending = num_choices
        while pending:
            try:
                ev = await asyncio.wait_for(events.queue.get(), HEALTH_POLL_S)
            except asyncio.TimeoutError:
                if not self.loop.alive:
                    yield ErrorEvent(None, "engine is not running")
                    return
                continue
            if isinstance(ev, ErrorEvent) or ev.finished:
                pending -= 1
            yield ev

    async def _collect(self, events: _Events, n: int, head: dict, num_prompt: int) -> web.Response:
        tokens: dict[int, list[int]] = {i: [] for i in range(n)}
        reasons: dict[int, str | None] = {}
        async for ev in self._events(events, n):
            if isinstance(ev, ErrorEvent):
                return _error(400 if ev.tag is not None else 503, ev.message,
                              "invalid_request_error" if ev.tag is not None else "server_error")
            tokens[ev.tag] += ev.token_ids
            if ev.finished:
                reasons[ev.tag] = ev.finish_reason
        num_out = sum(map(len, tokens.values()))
        return web.json_response({**head, "choices": [{"index": i, "text": _text(t), "token_ids": t, "logprobs": None,
                                                       "finish_reason": reasons.get(i)} for i, t in tokens.items()],
                                  "usage": {"prompt_tokens": num_prompt, "completion_tokens": num_out,
                                            "total_tokens": num_prompt + num_out}})

    async def _stream(self, request: BaseRequest, events: _Events, n: int, head: dict, num_prompt: int,
                      include_usage: bool) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)

        async def sse(obj: dict) -> None:
            await resp.write(f"data: {json.dumps(obj)}\n\n".encode())

        num_out = 0
        failed = False
        async for ev in self._events(events, n):
            if isinstance(ev, ErrorEvent):
                await sse({"error": {"message": ev.message, "type": "server_error", "param": None, "code": 500}})
                failed = True
                break
            num_out += len(ev.token_ids)
            await sse({**head, "choices": [{"index": ev.tag, "text": _text(ev.token_ids), "token_ids": list(ev.token_ids),
                                            "logprobs": None, "finish_reason": ev.finish_reason}]})
        if include_usage and not failed:
            await sse({**head, "choices": [], "usage": {"prompt_tokens": num_prompt, "completion_tokens": num_out,
                                                        "total_tokens": num_prompt + num_out}})
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


async def serve(api: ApiServer, host: str, port: int, started, stopping: asyncio.Event) -> None:
    """Serve until `stopping` is set; `started(host, port)` is called once the socket listens."""
    runner = web.ServerRunner(api.make_server(), handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024, reuse_address=True)
    await site.start()
    sock = site._server.sockets[0]
    started(*sock.getsockname()[:2])
    try:
        await stopping.wait()
    finally:
        await runner.cleanup()
