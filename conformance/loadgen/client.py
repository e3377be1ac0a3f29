"""One streaming completion request, timed by the harness's clock.

Contract: `stream_completion(...)` never raises for what the server does (refused connection,
HTTP error, broken or truncated stream, timeout): it returns a `RequestRecord` with `error`
set. Times come from `time.perf_counter()` and are seconds.
"""

from __future__ import annotations

import json
import time
from typing import Any, Mapping, NamedTuple

import httpx


class RequestRecord(NamedTuple):
    index: int
    start_s: float
    end_s: float
    ttft_s: float | None              # first chunk carrying text (or token ids)
    chunk_times_s: tuple[float, ...]  # arrival of every chunk carrying text (or token ids)
    num_output_tokens: int            # usage.completion_tokens, else the number of text chunks
    num_prompt_tokens: int | None
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def e2e_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def tpot_s(self) -> float | None:
        if self.ttft_s is None or self.num_output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.num_output_tokens - 1)

    def itl_s(self) -> list[float]:
        t = self.chunk_times_s
        return [b - a for a, b in zip(t, t[1:])]


def completion_body(model: str, prompt_token_ids: list[int], max_tokens: int, temperature: float,
                    extra: Mapping[str, Any] | None = None) -> dict:
    """OpenAI completions body with a fixed output length (`ignore_eos`, as vLLM and SGLang take it);
    `extra` adds an engine's own fields (e.g. vLLM's `return_token_ids`)."""
    body = {"model": model, "prompt": prompt_token_ids, "max_tokens": max_tokens, "temperature": temperature,
            "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
    body.update(extra or {})
    return body


async def stream_completion(client: httpx.AsyncClient, url: str, body: dict, index: int,
                            timeout_s: float) -> RequestRecord:
    start = time.perf_counter()
    chunks: list[float] = []
    usage: dict | None = None
    done = False
    error: str | None = None
    try:
        async with client.stream("POST", url, json=body, timeout=timeout_s) as resp:
            if resp.status_code != 200:
                text = (await resp.aread()).decode(errors="replace")[:500]
                error = f"HTTP {resp.status_code}: {text}"
            else:
                async for line in resp.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        done = True
                        break
                    now = time.perf_counter()
                    chunk = json.loads(data)
                    if chunk.get("error"):
                        error = f"server error in stream: {chunk['error']}"
                        break
                    if chunk.get("usage"):
                        usage = chunk["usage"]
                    if any(c.get("text") or c.get("token_ids") for c in chunk.get("choices") or []):
                        chunks.append(now)
                if error is None and not done:
                    error = "stream ended without data: [DONE]"
    except httpx.TimeoutException as exc:
        error = f"timed out after {timeout_s:.0f} s ({type(exc).__name__})"
    except (httpx.HTTPError, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    except json.JSONDecodeError as exc:
        error = f"stream chunk is not JSON: {exc.msg}"
    end = time.perf_counter()
    num_out = int(usage["completion_tokens"]) if usage and "completion_tokens" in usage else len(chunks)
    num_prompt = int(usage["prompt_tokens"]) if usage and "prompt_tokens" in usage else None
    return RequestRecord(index=index, start_s=start, end_s=end, ttft_s=(chunks[0] - start) if chunks else None,
                         chunk_times_s=tuple(chunks), num_output_tokens=num_out, num_prompt_tokens=num_prompt,
                         error=error)
