"""One streaming completion request on a keep-alive HTTP/1.1 connection, timed by the harness's clock.

Why not an HTTP library: the client must be faster than any engine it measures. Measured on a
2-core host against the stub server in its own process (`benchmarks/loadgen_clients.py`, 64-token
streams, c=64, one client process pinned to the other core, every SSE event parsed with
`json.loads`): httpx 125-170 req/s, aiohttp (what `vllm bench serve` uses) 1,180-1,270 req/s,
asyncio streams 1,220-1,330 req/s, this `asyncio.Protocol` with a minimal chunked + SSE parser
1,700-1,810 req/s (uvloop made no measurable difference there). Per received segment it does one
clock read and a few `bytes.find`s, then one `json.loads` per SSE event; nothing else runs per
token. It speaks only what an OpenAI-compatible server sends: a status line, headers, a chunked
or Content-Length body (or one delimited by the close).

Two request protocols (`REQUEST_PROTOCOLS`, named by an engine's manifest): `openai-completions`
(POST /v1/completions, what vLLM and the reference serve) and `sglang-generate` (SGLang's native POST
/generate with `input_ids`: its OpenAI routes need a tokenizer, which a shapes-only model has not, so
SGLang serves with `--skip-tokenizer-init` and only /generate answers in token ids). Both stream SSE
`data:` events ending in `data: [DONE]`; the parser tells them apart by their fields.

Contract: `Connection.stream(...)` never raises for what the server does (refused connection,
HTTP error, broken or truncated stream, timeout): it returns a `RequestRecord` with `error` set.
Times are `time.perf_counter()` seconds (see `record`). A chunk's time is when the segment
holding it was read from the socket, as aiohttp's `iter_any` loop in vLLM's bench sees it. A chunk
counts as a token chunk (TTFT, ITL, the last chunk of TPOT) when its `choices` list is non-empty,
whatever its text, as `vllm bench serve` counts them (a special token's empty text, a finish chunk);
the usage chunk (`choices: []`) and `[DONE]` do not.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any, Mapping

from conformance.loadgen.record import RequestRecord

_perf = time.perf_counter


def completion_body(model: str, prompt_token_ids: list[int], max_tokens: int, temperature: float,
                    extra: Mapping[str, Any] | None = None) -> dict:
    """OpenAI completions body with a fixed output length (`ignore_eos`, as vLLM and SGLang take it);
    `extra` adds an engine's own fields (e.g. vLLM's `return_token_ids`)."""
    body = {"model": model, "prompt": prompt_token_ids, "max_tokens": max_tokens, "temperature": temperature,
            "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
    body.update(extra or {})
    return body


def generate_body(model: str, prompt_token_ids: list[int], max_tokens: int, temperature: float,
                  extra: Mapping[str, Any] | None = None) -> dict:
    """SGLang's native /generate body with the same meaning as `completion_body` (token ids in, a fixed
    output length through `ignore_eos`, streamed); `model` is not part of it (one model per server)."""
    body = {"input_ids": prompt_token_ids, "stream": True,
            "sampling_params": {"max_new_tokens": max_tokens, "temperature": temperature, "ignore_eos": True}}
    body.update(extra or {})
    return body


OPENAI_COMPLETIONS, SGLANG_GENERATE = "openai-completions", "sglang-generate"
# protocol -> (path, body builder)
REQUEST_PROTOCOLS = {OPENAI_COMPLETIONS: ("/v1/completions", completion_body),
                     SGLANG_GENERATE: ("/generate", generate_body)}


def encode_request(host: str, port: int, path: str, body: dict) -> bytes:
    data = json.dumps(body, separators=(",", ":")).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data


class _Response:
    """Parse state of one response: head, then a chunked or Content-Length body, then SSE events."""

    __slots__ = ("status", "chunked", "remaining", "raw", "sse", "chunks", "num_text_chunks", "usage", "done",
                 "error", "complete", "text", "head_done", "num_output_ids")

    def __init__(self) -> None:
        self.status, self.chunked, self.remaining, self.head_done = 0, False, -1, False
        self.raw, self.sse = b"", b""
        self.chunks: list[float] = []
        self.num_text_chunks = 0   # chunks carrying text or token ids: the output length without usage
        self.usage: dict | None = None
        self.done, self.complete = False, False
        self.error: str | None = None
        self.text = b""   # body of a non-200 answer
        self.num_output_ids = 0   # native /generate: the output ids seen so far (they come cumulative)


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: Any = None
        self.resp: _Response | None = None
        self.waiter: asyncio.Future | None = None
        self.closed = False

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        r = self.resp
        if r is not None and not r.complete:
            if r.head_done and not r.chunked and r.remaining == -1:   # a body delimited by the close
                self._end(r)
                return
            r.error = r.error or (f"connection lost: {exc}" if exc else "connection closed by the server mid-response")
            self._finish()

    def _finish(self) -> None:
        self.resp.complete = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def data_received(self, data: bytes) -> None:
        now = _perf()
        r = self.resp
        if r is None or r.complete:
            return
        r.raw += data
        if not r.head_done:
            end = r.raw.find(b"\r\n\r\n")
            if end < 0:
                return
            head = r.raw[:end].lower()
            r.raw = r.raw[end + 4:]
            r.head_done = True
            try:
                r.status = int(head[9:12])
            except ValueError:
                r.error = f"not an HTTP response: {head[:40]!r}"
                self._finish()
                return
            r.chunked = b"transfer-encoding: chunked" in head
            i = head.find(b"content-length:")
            if i >= 0:
                j = head.find(b"\r\n", i)
                r.remaining = int(head[i + 15:j if j > 0 else len(head)])
        if r.chunked:
            self._dechunk(r, now)
        else:
            self._feed(r, r.raw, now)
            if r.remaining >= 0:   # Content-Length; without one the body ends when the server closes
                r.remaining -= len(r.raw)
                if r.remaining <= 0:
                    r.raw = b""
                    self._end(r)
            r.raw = b""

    def _dechunk(self, r: _Response, now: float) -> None:
        raw, pos, out = r.raw, 0, []
        while True:
            nl = raw.find(b"\r\n", pos)
            if nl < 0:
                break
            try:
                size = int(raw[pos:nl].split(b";", 1)[0], 16)
            except ValueError:
                r.error = r.error or f"malformed chunked body: chunk size {raw[pos:nl][:40]!r}"
                self._finish()
                return
            if size == 0:
                if raw.find(b"\r\n", nl + 2) < 0:   # trailers end with an empty line
                    break
                if out:
                    self._feed(r, b"".join(out), now)
                r.raw = b""
                self._end(r)
                return
            if len(raw) < nl + 2 + size + 2:
                break
            out.append(raw[nl + 2:nl + 2 + size])
            pos = nl + 2 + size + 2
        r.raw = raw[pos:]
        if out:
            self._feed(r, b"".join(out), now)

    def _feed(self, r: _Response, data: bytes, now: float) -> None:
        if r.status != 200:
            r.text += data
            return
        buf = r.sse + data
        start = 0
        while True:
            end = buf.find(b"\n\n", start)
            if end < 0:
                break
            event = buf[start:end]
            start = end + 2
            if not event.startswith(b"data:"):
                continue
            payload = event[5:].strip()
            if payload == b"[DONE]":
                r.done = True
                continue
            try:
                chunk = json.loads(payload)
            except ValueError as exc:
                r.error = r.error or f"stream chunk is not JSON: {exc}"
                continue
            if chunk.get("error"):
                r.error = r.error or f"server error in stream: {chunk['error']}"
                continue
            if chunk.get("usage"):
                r.usage = chunk["usage"]
            choices = chunk.get("choices")
            if choices:   # vLLM's bench: any chunk with choices, its text possibly empty
                r.chunks.append(now)
                c = choices[0]
                r.num_text_chunks += bool(c.get("text") or c.get("token_ids"))
            elif choices is None and isinstance(chunk.get("meta_info"), dict):
                _native_event(r, chunk, now)
        r.sse = buf[start:]

    def _end(self, r: _Response) -> None:
        if r.status != 200:
            r.error = f"HTTP {r.status}: {r.text.decode(errors='replace')[:500]}"
        elif r.error is None and not r.done:
            r.error = "stream ended without data: [DONE]"
        self._finish()


def _native_event(r: _Response, chunk: dict, now: float) -> None:
    """One SGLang /generate event: a token chunk when its (cumulative) `output_ids` grew; the usage from
    `meta_info` (the last event's counts stand)."""
    ids = chunk.get("output_ids")
    if isinstance(ids, list) and len(ids) > r.num_output_ids:
        r.chunks.append(now)
        r.num_text_chunks += 1
        r.num_output_ids = len(ids)
    meta = chunk["meta_info"]
    r.usage = {k: meta[k] for k in ("prompt_tokens", "completion_tokens") if k in meta}


def _count(usage: dict | None, key: str, default: int | None) -> tuple[int | None, str | None]:
    """usage[key] as a count of tokens (a non-negative integer below 2**63), else `default` and
    why it is not one (a server's answer is not trusted to be a number)."""
    if not usage or key not in usage:
        return default, None
    v = usage[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v < 2 ** 63) or int(v) != v:
        return default, f"usage.{key} is {v!r:.80}, not a count of tokens"
    return int(v), None


class Connection:
    """One keep-alive connection, one request at a time; reconnects after a close or an error."""

    def __init__(self, host: str, port: int, connect_timeout_s: float) -> None:
        self.host, self.port, self.connect_timeout_s = host, port, connect_timeout_s
        self.proto: _Protocol | None = None

    async def connect(self) -> None:
        self.close()
        loop = asyncio.get_running_loop()
        _, self.proto = await asyncio.wait_for(
            loop.create_connection(_Protocol, self.host, self.port), self.connect_timeout_s)

    def close(self) -> None:
        if self.proto is not None and self.proto.transport is not None:
            self.proto.transport.close()
        self.proto = None

    async def stream(self, payload: bytes, index: int, timeout_s: float, scheduled_s: float | None = None,
                     worker: int = 0) -> RequestRecord:
        """Send `payload` (an encoded request, see `encode_request`) and read its SSE stream."""
        start = _perf()
        r = _Response()
        try:
            if self.proto is None or self.proto.closed:
                await self.connect()
            p = self.proto
            p.resp, p.waiter = r, asyncio.get_running_loop().create_future()
            p.transport.write(payload)
            await asyncio.wait_for(p.waiter, timeout_s)
        except (asyncio.TimeoutError, TimeoutError):
            r.error = f"timed out after {timeout_s:g} s"
        except OSError as exc:
            r.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        end = _perf()
        if r.error is not None:
            self.close()
        u = r.usage if isinstance(r.usage, dict) else None
        if r.usage is not None and u is None:
            r.error = r.error or f"usage is {r.usage!r:.80}, not an object"
        num_out, bad = _count(u, "completion_tokens", r.num_text_chunks)
        num_prompt, bad_prompt = _count(u, "prompt_tokens", None)
        r.error = r.error or bad or bad_prompt
        return RequestRecord(index=index, start_s=start, end_s=end,
                             ttft_s=(r.chunks[0] - start) if r.chunks else None, chunk_times_s=tuple(r.chunks),
                             num_output_tokens=num_out, num_prompt_tokens=num_prompt, error=r.error,
                             scheduled_s=scheduled_s, worker=worker)
