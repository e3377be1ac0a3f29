"""The reference engine's OpenAI-compatible server in a process of its own, tiny shapes on the CPU.

    with ReferenceServer(cpu=0) as ref:
        ... ref.base_url, ref.model, ref.spec_counters() ...

Contract: `__enter__` starts `python -m engine_under_test.serve` (tiny-hybrid target, tiny-dflash
drafter, k = `num_speculative_tokens`, random weights, prefix caching off so a repeated prompt
costs what a new one does), optionally pinned to `cpu`, and returns once /health answers 200
(`RuntimeError` with the log's tail if it exits or does not answer within `startup_timeout_s`).
`spec_counters()` reads its speculative-decoding counters from /metrics (drafted and accepted
tokens) and its process's CPU seconds (Linux /proc): two clients given the same workload must
cause the same engine work. `__exit__` stops it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from conformance.loadgen.prometheus import parse_samples

REPO = Path(__file__).resolve().parent.parent
COUNTERS = {"draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
            "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
            "generation_tokens": "vllm:generation_tokens_total"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ReferenceServer:
    def __init__(self, cpu: int | None = None, num_speculative_tokens: int = 8, max_num_seqs: int = 8,
                 startup_timeout_s: float = 180.0) -> None:
        self.port = free_port()
        self.startup_timeout_s = startup_timeout_s
        models = REPO / "conformance/models"
        spec = json.dumps({"method": "dflash", "model": str(models / "tiny-dflash"),
                           "num_speculative_tokens": num_speculative_tokens})
        self.argv = [sys.executable, "-m", "engine_under_test.serve", "--model", str(models / "tiny-hybrid"),
                     "--speculative-config", spec, "--max-num-seqs", str(max_num_seqs), "--max-model-len", "512",
                     "--kv-cache-memory-bytes", str(64 << 20), "--no-enable-prefix-caching", "--port", str(self.port)]
        if cpu is not None:
            self.argv = ["taskset", "-c", str(cpu), *self.argv]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.model = ""

    def __enter__(self) -> "ReferenceServer":
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if httpx.get(f"{self.base_url}/health", timeout=2, trust_env=False).status_code == 200:
                    models = httpx.get(f"{self.base_url}/v1/models", timeout=10, trust_env=False).json()
                    self.model = models["data"][0]["id"]
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.__exit__()
        self.log.seek(0)
        raise RuntimeError(f"reference server did not come up:\n{self.log.read().decode(errors='replace')[-3000:]}")

    def spec_counters(self) -> dict[str, float]:
        """The engine's work so far: its spec-decoding counters and `cpu_s`, the CPU seconds its process used."""
        samples = parse_samples(httpx.get(f"{self.base_url}/metrics", timeout=10, trust_env=False).text)
        out = {name: samples.get(metric, 0.0) for name, metric in COUNTERS.items()}
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        out["cpu_s"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return out

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
