"""Validation of a `/v1/completions` body: every field the server reads is checked, and each
refusal is a `RequestError` (HTTP status, OpenAI error type, the field, a message naming it).

Contract: `parse_completion(body, model_name, vocab_size, max_model_len) -> Completion` or raises
`RequestError`. Accepted (OpenAI / vLLM names): model (must name the served model: else 404),
prompt (token ids, or a list of at most MAX_PROMPTS_PER_REQUEST such lists whose prompt plus
max_tokens sum to at most MAX_TOKENS_PER_REQUEST: no tokenizer), max_tokens, temperature (finite,
>= 0; below 1e-5 it is greedy, as vLLM's sampling epsilon), top_p, top_k, seed (an integer in
torch's seed range), ignore_eos, stream, stream_options.include_usage. Refused clearly, never
ignored: n / best_of other than 1, stop strings and stop_token_ids (the engine stops on EOS
only), logprobs, echo. Fields the server does not read are ignored, as vLLM ignores them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from engine_under_test.sampling_params import SamplingParams

GREEDY_BELOW_TEMPERATURE = 1e-5          # vLLM's _SAMPLING_EPS
SEED_MIN, SEED_MAX = -(2 ** 63), 2 ** 64 - 1   # torch.Generator.manual_seed's range
# A batch of prompts in one body: bounded so that a small body cannot keep the engine busy for minutes
MAX_PROMPTS_PER_REQUEST = 256
MAX_TOKENS_PER_REQUEST = 2 ** 18        # sum over the prompts of prompt tokens + max_tokens


class RequestError(ValueError):
    def __init__(self, message: str, status: int = 400, kind: str = "invalid_request_error",
                 param: str | None = None):
        super().__init__(message)
        self.status, self.kind, self.param = status, kind, param


@dataclass(frozen=True)
class Completion:
    prompts: list[list[int]]
    params: SamplingParams
    stream: bool
    include_usage: bool


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _bool(body: dict, name: str, default: bool) -> bool:
    v = body.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise RequestError(f"{name}: must be true or false, got {v!r}", param=name)
    return v


def _prompts(body: dict, vocab_size: int) -> list[list[int]]:
    p = body.get("prompt")
    if isinstance(p, list) and p and all(_is_int(t) for t in p):
        prompts = [p]
    elif isinstance(p, list) and p and all(isinstance(x, list) and x and all(_is_int(t) for t in x) for x in p):
        prompts = p
    else:
        raise RequestError("prompt: must be a non-empty list of token ids or a list of such lists "
                           "(this server has no tokenizer)", param="prompt")
    for i, ids in enumerate(prompts):
        bad = [t for t in ids if not 0 <= t < vocab_size]
        if bad:
            raise RequestError(f"prompt[{i}]: token ids must be integers in [0, {vocab_size}), got {bad[0]!r}",
                               param="prompt")
    return prompts


def _refused(body: dict) -> None:
    for name in ("n", "best_of"):
        v = body.get(name)
        if v is not None and v != 1 or isinstance(v, bool):
            raise RequestError(f"{name}: only 1 is supported by this server, got {v!r}", param=name)
    if body.get("stop") not in (None, "", []):
        raise RequestError("stop: stop strings need a tokenizer, which this server does not have", param="stop")
    if body.get("stop_token_ids") not in (None, []):
        raise RequestError("stop_token_ids: not supported (the engine stops on the model's EOS token only)",
                           param="stop_token_ids")
    if body.get("logprobs") is not None:
        raise RequestError("logprobs: not supported by this server", param="logprobs")
    if body.get("echo") not in (None, False):
        raise RequestError("echo: not supported by this server", param="echo")


def _sampling(body: dict) -> SamplingParams:
    max_tokens = body.get("max_tokens", 16)
    if not _is_int(max_tokens) or max_tokens < 1:
        raise RequestError(f"max_tokens: must be an integer >= 1, got {max_tokens!r}", param="max_tokens")
    temperature = body.get("temperature", 1.0)
    temperature = 1.0 if temperature is None else temperature
    if not _is_number(temperature) or temperature < 0:
        raise RequestError(f"temperature: must be a finite number >= 0, got {temperature!r}", param="temperature")
    if temperature < GREEDY_BELOW_TEMPERATURE:
        temperature = 0.0
    top_p = 1.0 if body.get("top_p") is None else body["top_p"]
    if not _is_number(top_p) or not 0 < top_p <= 1:
        raise RequestError(f"top_p: must be a number in (0, 1], got {top_p!r}", param="top_p")
    top_k = 0 if body.get("top_k") is None else body["top_k"]
    if not _is_int(top_k) or top_k < -1:
        raise RequestError(f"top_k: must be an integer >= -1, got {top_k!r}", param="top_k")
    seed = body.get("seed")
    if seed is not None and (not _is_int(seed) or not SEED_MIN <= seed <= SEED_MAX):
        raise RequestError(f"seed: must be an integer in [{SEED_MIN}, {SEED_MAX}], got {seed!r}", param="seed")
    return SamplingParams(max_tokens=max_tokens, temperature=float(temperature), seed=seed, top_k=max(top_k, 0),
                          top_p=float(top_p), ignore_eos=_bool(body, "ignore_eos", False))


def parse_completion(body: Any, model_name: str, vocab_size: int, max_model_len: int) -> Completion:
    if not isinstance(body, dict):
        raise RequestError("body: must be a JSON object")
    model = body.get("model")
    if model is not None and model != model_name:
        raise RequestError(f"The model `{model}` does not exist (this server serves `{model_name}`).",
                           status=404, kind="NotFoundError", param="model")
    _refused(body)
    prompts = _prompts(body, vocab_size)
    params = _sampling(body)
    stream = _bool(body, "stream", False)
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise RequestError(f"stream_options: must be an object, got {options!r}", param="stream_options")
    usage = (options or {}).get("include_usage")
    if usage is not None and not isinstance(usage, bool):
        raise RequestError(f"stream_options.include_usage: must be true or false, got {usage!r}",
                           param="stream_options")
    include_usage = bool(usage)
    if len(prompts) > MAX_PROMPTS_PER_REQUEST:
        raise RequestError(f"prompt: a batch of {len(prompts)} prompts is more than this server takes in one request "
                           f"(MAX_PROMPTS_PER_REQUEST = {MAX_PROMPTS_PER_REQUEST}); send several requests",
                           param="prompt")
    total_tokens = sum(map(len, prompts)) + len(prompts) * params.max_tokens
    if total_tokens > MAX_TOKENS_PER_REQUEST:
        raise RequestError(f"prompt: {len(prompts)} prompt(s) asking for {total_tokens} prompt + output tokens in all, "
                           f"more than this server takes in one request (MAX_TOKENS_PER_REQUEST = "
                           f"{MAX_TOKENS_PER_REQUEST}); send several requests", param="prompt")
    longest = max(map(len, prompts))
    if longest + params.max_tokens > max_model_len:
        raise RequestError(f"this model's maximum context length is {max_model_len} tokens; the request asks for "
                           f"{longest} prompt + {params.max_tokens} output tokens", param="max_tokens")
    return Completion(prompts, params, stream, include_usage)
