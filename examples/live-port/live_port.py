#!/usr/bin/env python3
"""The live port: the reference engine's own server, run in-process, with switchable defects.

    live_port.py <the argv of `python -m engine_under_test.serve`> --defects LIST [--slow-step-ratio R]

It runs `engine_under_test.serve.main.main(argv, wrap_engine=...)`: the server builds its engine
as always, and the port wraps that engine from the outside (`PortEngine`); nothing in
engine_under_test knows about the defects. `--defects none`, or a comma-separated list of:

  slow-step                after each engine step, wait for the device to finish what it launched,
                           then sleep R times that step's own wall time (R = --slow-step-ratio,
                           default 1/3). The wait keeps a pipelined engine (async scheduling) from
                           running its next step under the sleep, so the port serves at least a
                           quarter fewer tokens per second (more where pipelining hid host time:
                           the wait costs that overlap too); what it slept is the counter
                           `port:injected_sleep_seconds_total` on /metrics
  acceptance-off           the case's synthetic acceptance mapped wrong: a mean acceptance length
                           one less (at least 1), or per-position rates shifted one position
                           left (the first dropped, 0 appended); --speculative-config is
                           rewritten before the server reads it (needs rejection_sample_method
                           synthetic, else it says so and serves the case as given)
  draft-store-beside-pool  after the engine is built, a draft KV store per batch row allocated on
                           the engine's device outside the bounded pool and filled (resident):
                           draft layers x (max_model_len rounded up to a 16-token page, plus one
                           page) x 2 (K and V) x KV heads x head dim x dtype bytes (the drafter's
                           config.json) x max_num_seqs; one `live-port draft-store:` line says so
  startup-line-disagrees   the `reference-engine plan:` startup line prints max_concurrency (and
                           so kv_cache_tokens) doubled; the engine plans and runs as planned

Exit codes are the server's (2: bad flags, also for an unknown defect; 3: refused).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

DEFECTS = ("slow-step", "acceptance-off", "draft-store-beside-pool", "startup-line-disagrees")
PAGE_TOKENS = 16
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
SLEEP_COUNTER = "port:injected_sleep_seconds_total"
PREFIX = "live-port"


def draft_store_bytes(draft_dir: str | Path, max_model_len: int, max_num_seqs: int) -> int:
    """The store beside the pool: see the module doc (one row per sequence the batch can hold)."""
    cfg = json.loads((Path(draft_dir) / "config.json").read_text())
    tokens = -(-max_model_len // PAGE_TOKENS) * PAGE_TOKENS + PAGE_TOKENS
    dtype_bytes = DTYPE_BYTES.get(str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"), 2)
    per_row = cfg["num_hidden_layers"] * tokens * 2 * cfg["num_key_value_heads"] * cfg["head_dim"] * dtype_bytes
    return per_row * max_num_seqs


def wrong_acceptance(spec: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """(the speculative config with its synthetic acceptance mapped wrong, what changed)."""
    if spec.get("rejection_sample_method") != "synthetic":
        return spec, "no synthetic acceptance to map (rejection_sample_method is not synthetic): served as given"
    out = dict(spec)
    if "synthetic_acceptance_length" in spec:
        out["synthetic_acceptance_length"] = max(1.0, float(spec["synthetic_acceptance_length"]) - 1.0)
        return out, (f"synthetic_acceptance_length {spec['synthetic_acceptance_length']} served as "
                     f"{out['synthetic_acceptance_length']}")
    rates = [float(r) for r in spec["synthetic_acceptance_rates"]]
    out["synthetic_acceptance_rates"] = rates[1:] + [0.0]
    return out, f"synthetic_acceptance_rates {rates} served as {out['synthetic_acceptance_rates']}"


def _rewrite_spec(argv: list[str]) -> list[str]:
    out = list(argv)
    for i, a in enumerate(out):
        if a == "--speculative-config" and i + 1 < len(out):
            spec, said = wrong_acceptance(json.loads(out[i + 1]))
            out[i + 1] = json.dumps(spec)
            print(f"{PREFIX} acceptance-off: {said}", flush=True)
            return out
        if a.startswith("--speculative-config="):
            spec, said = wrong_acceptance(json.loads(a.split("=", 1)[1]))
            out[i] = "--speculative-config=" + json.dumps(spec)
            print(f"{PREFIX} acceptance-off: {said}", flush=True)
            return out
    print(f"{PREFIX} acceptance-off: no --speculative-config: served as given", flush=True)
    return out


def _drain_device() -> None:
    """Wait for every kernel the engine launched (CUDA only; nothing to wait for on a CPU)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class PortEngine:
    """The reference engine as the port serves it: every attribute is the engine's own, except
    what a switched-on defect overrides (`step`, `stats`, `plan`)."""

    def __init__(self, engine: Any, defects: list[str], slow_step_ratio: float):
        self._engine = engine
        self._ratio = slow_step_ratio
        self.injected_sleep_s = 0.0
        self.draft_store = None
        if "slow-step" in defects:
            self.step = self._slow_step
            self.stats = self._stats_with_sleep
        if "startup-line-disagrees" in defects:
            mem = engine.plan.memory
            self.plan = dataclasses.replace(engine.plan, memory=dataclasses.replace(
                mem, max_concurrency=2 * mem.max_concurrency))
        if "draft-store-beside-pool" in defects:
            self._allocate_draft_store()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def _slow_step(self):
        t0 = time.perf_counter()
        out = self._engine.step()
        _drain_device()   # a pipelined engine's launched step would run on during the sleep and hide it
        pause = (time.perf_counter() - t0) * self._ratio
        time.sleep(pause)
        self.injected_sleep_s += pause
        return out

    def _stats_with_sleep(self):
        s = self._engine.stats()
        counters = {**s.extra.get("counters", {}), SLEEP_COUNTER: self.injected_sleep_s}
        return dataclasses.replace(s, extra={**s.extra, "counters": counters})

    def _allocate_draft_store(self) -> None:
        import torch

        cfg = self._engine.cfg
        spec = cfg.speculative_config
        if spec is None or spec.model is None:
            print(f"{PREFIX} draft-store: no drafter, no store", flush=True)
            return
        nbytes = draft_store_bytes(spec.model, cfg.max_model_len, cfg.max_num_seqs)
        device = self._engine.runner.device
        self.draft_store = torch.ones(nbytes, dtype=torch.uint8, device=device)   # written: resident
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        print(f"{PREFIX} draft-store: beside the pool bytes={nbytes} rows={cfg.max_num_seqs} "
              f"per_row_bytes={nbytes // cfg.max_num_seqs} device={device.type}", flush=True)


def parse_port_args(argv: list[str]) -> tuple[list[str], float, list[str]]:
    """(defects, slow-step ratio, the server's argv); exits 2 naming a bad --defects entry."""
    ap = argparse.ArgumentParser(prog="live_port.py", add_help=False)
    ap.add_argument("--defects", default="none")
    ap.add_argument("--slow-step-ratio", type=float, default=1 / 3)
    ns, rest = ap.parse_known_args(argv)
    defects = [] if ns.defects in ("", "none") else [d.strip() for d in ns.defects.split(",")]
    unknown = [d for d in defects if d not in DEFECTS]
    if unknown:
        ap.error(f"--defects: unknown {', '.join(unknown)} (known: {', '.join(DEFECTS)}, or none)")
    if not ns.slow_step_ratio > 0:
        ap.error(f"--slow-step-ratio: must be > 0, got {ns.slow_step_ratio}")
    return defects, ns.slow_step_ratio, rest


def main(argv: list[str] | None = None) -> int:
    defects, ratio, server_argv = parse_port_args(sys.argv[1:] if argv is None else argv)
    print(f"{PREFIX}: defects={','.join(defects) or 'none'}", flush=True)
    if "acceptance-off" in defects:
        server_argv = _rewrite_spec(server_argv)
    from engine_under_test.serve.main import main as serve

    return serve(server_argv, wrap_engine=lambda engine: PortEngine(engine, defects, ratio))


if __name__ == "__main__":
    code = main()
    logging.shutdown()        # as `python -m engine_under_test.serve` leaves (its __main__.py says why)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
