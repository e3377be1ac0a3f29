"""The stub server in a process of its own (optionally pinned to one CPU), for benchmarks.

A benchmark of the client must not share the client's core or interpreter with the server it
drives, so `StubProcess` runs `python -m conformance.loadgen.stub_server` and reads its state
over HTTP (GET /stub/state: counters and the CPU seconds the stub has used).

    with StubProcess(cpu=0, step_delay_s=0.0, first_token_delay_s=0.0) as stub:
        ... stub.base_url ...; stub.state()["cpu_s"]
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import httpx


class StubProcess:
    def __init__(self, cpu: int | None = None, tokens_per_step: int = 1, step_delay_s: float = 0.0,
                 first_token_delay_s: float = 0.0) -> None:
        self.argv = [sys.executable, "-m", "conformance.loadgen.stub_server", "--tokens-per-step",
                     str(tokens_per_step), "--step-delay-s", repr(step_delay_s), "--first-token-delay-s",
                     repr(first_token_delay_s)]
        if cpu is not None:
            self.argv += ["--cpu", str(cpu)]
        self.proc: subprocess.Popen | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "StubProcess":
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        if not line.startswith("port "):
            self.proc.kill()
            raise RuntimeError(f"stub server did not start: {line!r}")
        self.port = int(line.split()[1])
        return self

    def state(self) -> dict[str, Any]:
        return httpx.get(f"{self.base_url}/stub/state", timeout=10, trust_env=False).json()

    def __exit__(self, *exc: Any) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
