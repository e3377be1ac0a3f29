"""The load generator against `vllm bench serve`: same server, same workload, same run.

    .venv/bin/python benchmarks/loadgen_vs_vllm_bench.py [--vllm PATH] [--requests 200]
        [--servers stub,reference] [--ceiling-requests 3000]

`vllm bench serve` (from the cached vLLM venv) and `conformance.loadgen` take turns on each
server at each concurrency, closed loop (vLLM's `--request-rate inf --max-concurrency c`),
prompts of 16 token ids, `--output-tokens` tokens with ignore_eos, greedy (temperature 0 on both:
under sampling a random-weight draft is accepted far more often than under greedy, so the
reference engine runs a different workload). Servers: the stub in its own
process with `--step-delay-ms` between tokens (a paced engine), and the reference engine's
server (`python -m engine_under_test.serve`, tiny shapes, CPU). The two clients alternate
`--rounds` times per point (a shared, noisy host: only figures taken side by side compare).
Printed side by side: the median over rounds of each client's TTFT, TPOT and ITL medians and
output tokens/s, and our/vLLM ratios. Then both clients' ceiling: the burst stub (no delay) at
`--ceiling-concurrency`, the best requests/s and tokens/s over the rounds. Each client runs
pinned to `--client-cpu`, each server to `--server-cpu`.

Offline: vLLM's bench needs a tokenizer even for pre-tokenized prompts. It gets one built here
(a word-level `tokenizers` vocabulary of the model's 1024 ids, saved with
`PreTrainedTokenizerFast`; no hub access, HF_HUB_OFFLINE=1) and the `timed_trace` dataset
(a jsonl of input/output lengths and hash ids, which vLLM expands into token-id prompts; the
reference server takes token ids only) with `--no-self-timed`. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from conformance.loadgen import LoadgenSettings, MetricNames, Workload, run_ladder
from conformance.loadgen.stub_process import StubProcess

REPO = Path(__file__).resolve().parent.parent
VLLM = Path.home() / ".cache/dflash-conformance/oracles/vllm-0.33.0/bin/vllm"
PROMPT_TOKENS = 16


def build_tokenizer(out: Path, vocab_size: int = 1024) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(vocab_size)}, unk_token="t1"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t1").save_pretrained(out)
    return out


def write_trace(path: Path, n: int, output_tokens: int) -> Path:
    with path.open("w") as f:
        for i in range(n):
            f.write(json.dumps({"timestamp": 0, "input_length": PROMPT_TOKENS, "output_length": output_tokens,
                                "hash_ids": [i]}) + "\n")
    return path


def vllm_bench(vllm: Path, base_url: str, model: str, tok: Path, trace: Path, c: int, n: int, work: Path,
               cpu: int | None) -> dict:
    out = work / f"vllm-{c}-{time.monotonic_ns()}.json"
    argv = [str(vllm), "bench", "serve", "--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions",
            "--model", model, "--tokenizer", str(tok), "--dataset-name", "timed_trace", "--dataset-path", str(trace),
            "--no-self-timed", "--request-rate", "inf", "--max-concurrency", str(c), "--num-prompts", str(n),
            "--ignore-eos", "--temperature", "0", "--num-warmups", str(c), "--save-result", "--result-dir", str(work),
            "--result-filename", out.name, "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles",
            "50,90,99", "--disable-tqdm"]
    if cpu is not None:
        argv = ["taskset", "-c", str(cpu), *argv]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"vllm bench serve failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())


def ours(base_url: str, c: int, n: int, output_tokens: int, cpu: int | None) -> dict:
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})
    w = Workload(num_requests=n, prompt_tokens=PROMPT_TOKENS, output_tokens=output_tokens, seed=0, vocab_size=1024)
    s = LoadgenSettings(concurrencies=(c,), num_warmup_waves=1, min_requests_per_slot=1, max_num_requests_per_rung=n,
                        num_client_processes=1, keep_records=False)
    (r,) = run_ladder(base_url, w, s, MetricNames()).rungs
    if r["status"] != "ok":
        raise RuntimeError(f"loadgen rung failed: {r['message']}")
    return r


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ReferenceServer:
    def __init__(self, cpu: int | None) -> None:
        self.port = free_port()
        spec = json.dumps({"method": "dflash", "model": str(REPO / "conformance/models/tiny-dflash"),
                           "num_speculative_tokens": 8})
        self.argv = [sys.executable, "-m", "engine_under_test.serve", "--model", str(REPO / "conformance/models/tiny-hybrid"),
                     "--speculative-config", spec, "--max-num-seqs", "8", "--max-model-len", "512",
                     "--kv-cache-memory-bytes", str(64 << 20), "--port", str(self.port)]
        if cpu is not None:
            self.argv = ["taskset", "-c", str(cpu), *self.argv]
        self.base_url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "ReferenceServer":
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base_url}/health", timeout=2, trust_env=False).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        self.log.seek(0)
        raise RuntimeError(f"reference server did not come up:\n{self.log.read().decode(errors='replace')[-3000:]}")

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)


def _ours_figures(r: dict) -> tuple[float, ...]:
    return r["ttft_ms"]["median"], r["tpot_ms"]["median"], r["itl_ms"]["median"], r["output_tok_per_s"]


def _vllm_figures(v: dict) -> tuple[float, ...]:
    return v["median_ttft_ms"], v["median_tpot_ms"], v["median_itl_ms"], v["output_throughput"]


def _medians(rows: list[tuple[float, ...]]) -> tuple[float, ...]:
    return tuple(statistics.median(col) for col in zip(*rows))


def _row(label: str, c: int, mine: tuple[float, ...], theirs: tuple[float, ...]) -> str:
    cells = " ".join(f"{a:>9.3f} {b:>9.3f} {a / b if b else float('nan'):>6.3f}" for a, b in zip(mine, theirs))
    return f"{label:<10} {c:>3} {cells}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm", type=Path, default=VLLM)
    ap.add_argument("--servers", default="stub,reference")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--stub-concurrency", default="1,4,16")
    ap.add_argument("--reference-concurrency", default="1,4")
    ap.add_argument("--reference-requests", type=int, default=32)
    ap.add_argument("--reference-output-tokens", type=int, default=32)
    ap.add_argument("--step-delay-ms", type=float, default=2.0)
    ap.add_argument("--ceiling-concurrency", type=int, default=64)
    ap.add_argument("--ceiling-requests", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3, help="alternations of the two clients per point")
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--server-cpu", type=int, default=0)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="loadgen-vs-vllm-"))
    tok = build_tokenizer(work / "tokenizer")
    servers = a.servers.split(",")
    print(f"closed loop, prompts {PROMPT_TOKENS} token ids, ignore_eos; clients on CPU {a.client_cpu}, servers on "
          f"CPU {a.server_cpu}; vllm: {a.vllm}")
    head = " ".join(f"{m + ' ours':>9} {m + ' vllm':>9} {'ratio':>6}" for m in ("TTFT", "TPOT", "ITL", "tok/s"))
    print(f"{'server':<10} {'c':>3} {head}   (ms; tok/s)")
    if "stub" in servers:
        trace = write_trace(work / "stub.jsonl", a.requests, a.output_tokens)
        with StubProcess(cpu=a.server_cpu, step_delay_s=a.step_delay_ms / 1e3) as stub:
            for c in (int(x) for x in a.stub_concurrency.split(",")):
                theirs, mine = [], []
                for _ in range(a.rounds):
                    theirs.append(_vllm_figures(vllm_bench(a.vllm, stub.base_url, "stub", tok, trace, c, a.requests,
                                                           work, a.client_cpu)))
                    mine.append(_ours_figures(ours(stub.base_url, c, a.requests, a.output_tokens, a.client_cpu)))
                print(_row(f"stub {a.step_delay_ms:g}ms", c, _medians(mine), _medians(theirs)), flush=True)
    if "reference" in servers:
        trace = write_trace(work / "ref.jsonl", a.reference_requests, a.reference_output_tokens)
        with ReferenceServer(a.server_cpu) as ref:
            model = httpx.get(f"{ref.base_url}/v1/models", trust_env=False).json()["data"][0]["id"]
            for c in (int(x) for x in a.reference_concurrency.split(",")):
                theirs, mine = [], []
                for _ in range(a.rounds):
                    theirs.append(_vllm_figures(vllm_bench(a.vllm, ref.base_url, model, tok, trace, c,
                                                           a.reference_requests, work, a.client_cpu)))
                    mine.append(_ours_figures(ours(ref.base_url, c, a.reference_requests, a.reference_output_tokens,
                                                   a.client_cpu)))
                print(_row("reference", c, _medians(mine), _medians(theirs)), flush=True)
    if a.ceiling_requests:
        c, n = a.ceiling_concurrency, a.ceiling_requests
        trace = write_trace(work / "ceiling.jsonl", n, a.output_tokens)
        theirs, mine = [], []
        with StubProcess(cpu=a.server_cpu) as stub:
            for _ in range(a.rounds):
                theirs.append(vllm_bench(a.vllm, stub.base_url, "stub", tok, trace, c, n, work, a.client_cpu))
                mine.append(ours(stub.base_url, c, n, a.output_tokens, a.client_cpu))
        rounds_ours = ", ".join(f"{r['request_per_s']:.0f}" for r in mine)
        rounds_vllm = ", ".join(f"{v['request_throughput']:.0f}" for v in theirs)
        best_v = max(theirs, key=lambda v: v["output_throughput"])
        best_o = max(mine, key=lambda r: r["output_tok_per_s"])
        print(f"ceiling, burst stub, c={c}, {n} requests of {a.output_tokens} tokens, best of {a.rounds} "
              f"(each round: ours {rounds_ours} req/s; vllm {rounds_vllm} req/s): "
              f"ours {best_o['request_per_s']:.0f} req/s {best_o['output_tok_per_s']:.0f} tok/s; "
              f"vllm bench serve {best_v['request_throughput']:.0f} req/s {best_v['output_throughput']:.0f} tok/s; "
              f"ratio {best_o['output_tok_per_s'] / best_v['output_throughput']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
