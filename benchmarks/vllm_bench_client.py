"""`vllm bench serve` as a benchmark's second client: offline, on pre-tokenized prompts, its JSON read back.

    with VllmBench(vllm_venv, work, cpu=1) as bench:
        result = bench.run(base_url, model, concurrency, num_requests, prompt_tokens, output_tokens)

Contract: `run` runs the real `vllm bench serve` (its CLI entry function in a resident interpreter
of the cached vLLM venv, `vllm_bench_resident`, pinned to `cpu`), closed loop (`--request-rate inf
--max-concurrency c`, `--num-warmups c`) or, given `arrival_offsets_s`, open loop on exactly those
arrivals (the trace's timestamps, `--self-timed`, no concurrency cap, `--num-warmups
OPEN_LOOP_WARMUPS`: another client can send on the same schedule), greedy (`--temperature 0`),
a fixed output length (`--ignore-eos`), and returns its saved result (`--save-result --save-detailed`: the summary
figures and every request's ttft / itl / latency / output length). It raises `RuntimeError` with
the end of vLLM's log when the run fails or any request failed. `prompts(...)` gives the token-id
prompts that `run` sends for the same arguments (vLLM's own draw), so this project's client can
replay exactly those (`Workload(prompts=...)`). `start` / `wait_for_warmup` / `finish` split `run`
so that another client can run beside it against the same server at the same time.

Offline: vLLM's bench needs a tokenizer even for token-id prompts, so one is built here (a
word-level `tokenizers` vocabulary of the model's ids, saved with `PreTrainedTokenizerFast`; no hub
access, HF_HUB_OFFLINE=1). Prompts come from vLLM's `timed_trace` dataset (a jsonl of input /
output lengths and hash ids that vLLM expands into token-id prompts: the reference server takes
token ids only); closed loop with `--no-self-timed`, so arrivals follow `--request-rate`, not the
trace; open loop with `--self-timed`, so vLLM's own `get_request` sleeps until each timestamp.

`figures(result)` reads what the table compares: vLLM's own medians (numpy's, over requests for
TTFT / TPOT / E2EL, over every gap for ITL) and its output tokens/s (total output tokens over the
benchmark's duration).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

VLLM_VENV = Path.home() / ".cache/dflash-conformance/oracles/vllm-0.33.0"
RESIDENT = Path(__file__).resolve().parent / "vllm_bench_resident.py"
TRACE_CHUNK_TOKENS = 16   # vLLM's --timed-trace-chunk-hash-size default
OPEN_LOOP_WARMUPS = 4     # as conformance.loadgen's open-loop rung: one closed warm-up wave of 4


def build_tokenizer(out: Path, vocab_size: int) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(vocab_size)}, unk_token="t1"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t1").save_pretrained(out)
    return out


def write_trace(path: Path, num_requests: int, prompt_tokens: int, output_tokens: int,
                timestamps_s: list[float] | None = None) -> Path:
    """One line per request. vLLM expands each hash id into TRACE_CHUNK_TOKENS tokens and stops at the
    last id, so a prompt needs ceil(prompt_tokens / TRACE_CHUNK_TOKENS) ids (distinct across requests).
    `timestamps_s`: each request's arrival, seconds from the first (read only with `--self-timed`)."""
    if timestamps_s is not None and len(timestamps_s) != num_requests:
        raise ValueError(f"write_trace: {len(timestamps_s)} timestamps for {num_requests} requests")
    k = -(-prompt_tokens // TRACE_CHUNK_TOKENS)
    with path.open("w") as f:
        for i in range(num_requests):
            ts = 0 if timestamps_s is None else timestamps_s[i]
            f.write(json.dumps({"timestamp": ts, "input_length": prompt_tokens, "output_length": output_tokens,
                                "hash_ids": list(range(i * k, (i + 1) * k))}) + "\n")
    return path


def bench_argv(base_url: str, model: str, tokenizer: Path, trace: Path, concurrency: int | None, num_requests: int,
               result_dir: Path, result_name: str) -> list[str]:
    """The arguments after `vllm bench serve`: closed loop at `concurrency`, or (None) the trace's own
    timestamps with no concurrency cap."""
    load = (["--self-timed", "--num-warmups", str(OPEN_LOOP_WARMUPS)] if concurrency is None else
            ["--no-self-timed", "--request-rate", "inf", "--max-concurrency", str(concurrency), "--num-warmups",
             str(concurrency)])
    return ["--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions", "--model", model,
            "--tokenizer", str(tokenizer), "--dataset-name", "timed_trace", "--dataset-path", str(trace), *load,
            "--num-prompts", str(num_requests), "--ignore-eos", "--temperature", "0",
            "--save-result", "--save-detailed", "--result-dir", str(result_dir),
            "--result-filename", result_name, "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", "50,90,99", "--disable-tqdm"]


class VllmBench:
    def __init__(self, venv: Path, work: Path, cpu: int | None = None, vocab_size: int = 1024) -> None:
        self.venv, self.work, self.cpu = venv, work, cpu
        self.tokenizer = build_tokenizer(work / "tokenizer", vocab_size)
        self.log_path = work / "vllm-bench.log"

    @property
    def version(self) -> str:
        return self.venv.name

    def __enter__(self) -> "VllmBench":
        argv = [str(self.venv / "bin/python"), str(RESIDENT)]
        if self.cpu is not None:
            argv = ["taskset", "-c", str(self.cpu), *argv]
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
        env.pop("PYTHONPATH", None)
        self.log = self.log_path.open("w")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True, bufsize=1, env=env, cwd=str(self.work))
        if json.loads(self.proc.stdout.readline() or "{}").get("ready") is not True:
            raise RuntimeError(f"vllm bench serve did not start:\n{self._log_tail()}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def _log_tail(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-3000:]

    def _ask(self, request: object) -> dict:
        self._send(request)
        return self._receive()

    def _send(self, request: object) -> None:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()

    def _receive(self) -> dict:
        answer = json.loads(self.proc.stdout.readline() or '{"ok": false, "error": "exited"}')
        if not answer["ok"]:
            raise RuntimeError(f"vllm bench serve failed: {answer.get('error')}\n{self._log_tail()}")
        return answer

    def _argv(self, base_url: str, model: str, concurrency: int | None, num_requests: int, prompt_tokens: int,
              output_tokens: int, result_name: str, arrival_offsets_s: list[float] | None = None) -> list[str]:
        timed = "" if arrival_offsets_s is None else f"-timed{zlib.crc32(json.dumps(arrival_offsets_s).encode()):08x}"
        trace = self.work / f"trace-{num_requests}-{prompt_tokens}-{output_tokens}{timed}.jsonl"
        if not trace.exists():
            write_trace(trace, num_requests, prompt_tokens, output_tokens, arrival_offsets_s)
        return bench_argv(base_url, model, self.tokenizer, trace, concurrency, num_requests, self.work, result_name)

    def prompts(self, base_url: str, model: str, num_requests: int, prompt_tokens: int,
                output_tokens: int) -> list[list[int]]:
        """The token-id prompts `run` sends for these arguments, in order (vLLM's own draw)."""
        argv = self._argv(base_url, model, 1, num_requests, prompt_tokens, output_tokens, "unused.json")
        return self._ask({"samples": argv})["prompts"]

    def run(self, base_url: str, model: str, concurrency: int | None, num_requests: int, prompt_tokens: int,
            output_tokens: int, arrival_offsets_s: list[float] | None = None) -> dict:
        """Closed loop at `concurrency`, or (`concurrency` None) open loop on `arrival_offsets_s`."""
        return self.finish(self.start(base_url, model, concurrency, num_requests, prompt_tokens, output_tokens,
                                      arrival_offsets_s))

    def start(self, base_url: str, model: str, concurrency: int | None, num_requests: int, prompt_tokens: int,
              output_tokens: int, arrival_offsets_s: list[float] | None = None) -> "Started":
        """`run` without waiting: the bench is asked and runs; `finish` reads its result."""
        if (concurrency is None) != (arrival_offsets_s is not None):
            raise ValueError("run: give either a concurrency (closed loop) or arrival offsets (open loop)")
        out = self.work / f"vllm-{concurrency}-{num_requests}-{time.monotonic_ns()}.json"
        self.log.flush()
        mark = self.log_path.stat().st_size
        self._send(self._argv(base_url, model, concurrency, num_requests, prompt_tokens, output_tokens, out.name,
                              arrival_offsets_s))
        return Started(out, num_requests, prompt_tokens, mark)

    def wait_for_warmup(self, started: "Started", timeout_s: float = 60.0) -> None:
        """Block until the started run prints its warm-up line (its initial test request is done; the
        warm-ups and then the measured requests follow at once)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.log_path.open("rb") as f:
                f.seek(started.log_offset)
                if b"Warming up with" in f.read():
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.005)
        raise RuntimeError(f"vllm bench serve did not reach its warm-up in {timeout_s:g} s:\n{self._log_tail()}")

    def finish(self, started: "Started") -> dict:
        self._receive()
        out, num_requests, prompt_tokens = started.result_path, started.num_requests, started.prompt_tokens
        if not out.exists():
            raise RuntimeError(f"vllm bench serve wrote no result:\n{self._log_tail()}")
        result = json.loads(out.read_text())
        out.unlink()
        if result["failed"] or result["completed"] != num_requests:
            raise RuntimeError(f"vllm bench serve: {result['failed']} of {num_requests} requests failed: "
                               f"{next((e for e in result['errors'] if e), '')[:2000]}")
        if set(result["input_lens"]) != {prompt_tokens}:
            raise RuntimeError(f"vllm bench serve sent prompts of {sorted(set(result['input_lens']))} tokens, "
                               f"not {prompt_tokens}")
        return result


@dataclass(frozen=True)
class Started:
    """A `vllm bench serve` run asked for and not yet read back."""
    result_path: Path
    num_requests: int
    prompt_tokens: int
    log_offset: int           # the bench log's size when it was asked (its lines for this run follow)


def as_records(result: dict) -> list:
    """vLLM's per-request timings (`--save-detailed`) as this project's `RequestRecord`s: start, TTFT,
    every chunk (TTFT then each ITL gap), end at vLLM's latency (its last chunk)."""
    from itertools import accumulate

    from conformance.loadgen.record import RequestRecord

    out = []
    for i, (st, ttft, itl, lat, n) in enumerate(zip(result["start_times"], result["ttfts"], result["itls"],
                                                    result["latencies"], result["output_lens"])):
        chunks = tuple(accumulate(itl, initial=st + ttft))
        out.append(RequestRecord(index=i, start_s=st, end_s=st + lat, ttft_s=ttft, chunk_times_s=chunks,
                                 num_output_tokens=n, num_prompt_tokens=None, error=None))
    return out


def figures(result: dict) -> dict[str, float]:
    return {"ttft_ms": result["median_ttft_ms"], "tpot_ms": result["median_tpot_ms"],
            "itl_ms": result["median_itl_ms"], "e2el_ms": result["median_e2el_ms"],
            "output_tok_per_s": result["output_throughput"], "request_per_s": result["request_throughput"],
            "num_output_tokens": result["total_output_tokens"], "num_prompt_tokens": result["total_input_tokens"]}
