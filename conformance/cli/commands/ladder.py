"""`conformance ladder --engine E|--manifest M --case C`: a live throughput ladder through the process adapter.

Starts the engine (its engine file's `live:` section, or a manifest) with the case's knobs, drives the
load generator at each concurrency (closed loop) or each request rate (open loop: `--request-rate`,
`--arrival`, `--burstiness`, `--max-concurrency`; see `ladder_load`) while sampling the engine from
outside (NVML device memory of its process tree, its running-requests gauge), prints a table and the
live checks (`check_table.LIVE_CHECKS`), and writes the `run`-mode observation (JSON). An open-loop
rung's row shows the rate asked, the rate sent and who is saturated when it fell short. Exit
status: 0 when the observation is ok and no live check failed, 1 when it is an error or refused or a
live check failed, 2 for a bad case, engine, manifest or option; interrupted (Ctrl-C, SIGTERM), it
stops the engine, writes `--out` with the rungs measured so far (an `error` observation saying it
was interrupted) and exits 128 + the signal (130, 143).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

from conformance.cli.commands.ladder_load import add_load_arguments, load_settings
from conformance.documents.cases import find_case
from conformance.errors import ConformanceError
from conformance.report.console_text import inert

NAME = "ladder"
HELP = "run a live throughput ladder on an engine through its process-adapter manifest"
SATURATED = {"client": "client", "concurrency_cap": "engine"}   # who held the rate back (open loop)


def add_arguments(p: argparse.ArgumentParser) -> None:
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--engine", help="an engine (shipped name or engine file) whose `live:` section says how it serves")
    who.add_argument("--manifest", help="a process manifest file, or a shipped manifest name (reference, vllm, sglang)")
    p.add_argument("--case", required=True, help="case id or path to a case file")
    add_load_arguments(p)
    p.add_argument("--repeats", type=int, default=1, help="measured repeats per rung")
    p.add_argument("--warmup-waves", type=int, default=1,
                   help="waves of c warm-up requests per rung (open loop: c = the cap, else 4)")
    p.add_argument("--min-requests-per-slot", type=int, default=2)
    p.add_argument("--request-timeout-s", type=float, default=300.0)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a manifest placeholder (e.g. vllm=/opt/venv/bin/vllm, device=cuda)")
    p.add_argument("--log-dir", type=Path, default=None, help="keep the engine's log here")
    p.add_argument("--out", type=Path, default=None, help="write the observation JSON here")


def _rung_label(rung: dict[str, Any]) -> str:
    if rung.get("mode") == "open":
        return f"rate={rung['request_rate_per_s']:g}/s"
    return f"c={rung['concurrency']}"


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def print_table(obs: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    th = obs.get("throughput") or {}
    plan = th.get("plan") or {}
    rungs = th.get("rungs") or []
    open_loop = any(r.get("mode") == "open" for r in rungs)
    title = (f"{obs['engine']['name']} {obs['engine']['version']} on {obs['case_id']} "
             f"({obs['device'].get('hardware')}); plan: " + ", ".join(f"{k}={v}" for k, v in plan.items()))
    t = Table(title=title)
    lead = ("asked /s", "arrival", "sent /s", "cap", "saturated") if open_loop else ("c",)
    for col in (*lead, "status", "out tok/s", "req/s", "TTFT ms p50 [p10-p90]", "TPOT ms p50", "ITL ms p50",
                "accept len", "requests"):
        t.add_column(col, justify="right")

    def med(s: dict | None, spread: bool = False) -> str:
        if not s:
            return "-"
        return f"{s['median']:.1f} [{s['p10']:.1f}-{s['p90']:.1f}]" if spread else f"{s['median']:.2f}"

    for r in rungs:
        if open_loop:
            cells = (f"{r['request_rate_per_s']:g}", str(r.get("arrival", "-")),
                     _num(r.get("achieved_request_per_s"), ".2f"), str(r.get("max_concurrency") or "-"),
                     SATURATED.get(r.get("saturated"), "-"))
        else:
            cells = (str(r["concurrency"]),)
        t.add_row(*cells, r["status"], _num(r.get("output_tok_per_s") or None, ".1f"),
                  _num(r.get("request_per_s") or None, ".2f"), med(r.get("ttft_ms"), True),
                  med(r.get("tpot_ms")), med(r.get("itl_ms")), _num(r.get("mean_acceptance_length") or None, ".2f"),
                  str(r.get("num_requests", 0)))
    Console(width=None if sys.stdout.isatty() else 160).print(t)
    for r in rungs:
        if r.get("saturation_message"):
            print(f"{_rung_label(r)}: {r['saturation_message']}")


def _write(path: Path, obs: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obs, indent=2, sort_keys=True) + "\n")


def run(args: argparse.Namespace) -> int:
    from conformance.engines.manifest import load_manifest, placeholder_overrides
    from conformance.harness.live import run_live

    if args.engine:
        from conformance.engines.manifest import manifest_from_engine_file
        from conformance.engines.registry import resolve_engine

        engine = resolve_engine(args.engine)
        if not engine.live:
            raise ConformanceError(f"{engine.path}: engine {engine.name} has no `live:` section: it cannot be served")
        manifest = manifest_from_engine_file(engine.live, engine.path, engine.name)
    else:
        manifest = load_manifest(args.manifest)
    case = find_case(args.case)
    settings = load_settings(args, num_repeats=args.repeats, num_warmup_waves=args.warmup_waves,
                             min_requests_per_slot=args.min_requests_per_slot,
                             request_timeout_s=args.request_timeout_s)

    def progress(rung: dict[str, Any]) -> None:
        tps = rung.get("output_tok_per_s")
        print(f"ladder: {_rung_label(rung)} {rung['status']}" + (f" {tps:.1f} tok/s" if tps else ""),
              file=sys.stderr, flush=True)

    from conformance.run.interrupt import Interrupts

    with Interrupts() as stop:
        try:
            obs = run_live(manifest, case.to_json(), settings, placeholder_overrides(args.set), args.log_dir, on_rung=progress)
        except KeyboardInterrupt as exc:   # the rungs measured so far are written, then the signal's exit code
            partial = getattr(exc, "observation", None)
            if partial is not None and args.out:
                _write(args.out, partial)
                print(f"conformance ladder: interrupted; the {len(partial['throughput']['rungs']) if partial.get('throughput') else 0} "
                      f"measured rung(s) are in {args.out}", file=sys.stderr)
            else:
                print("conformance ladder: interrupted", file=sys.stderr)
            return stop.exit_code or 130
        if stop.signum is not None:   # a signal that something below caught and turned into a failed rung
            obs["status"] = "error"
            obs["message"] = f"interrupted ({signal.Signals(stop.signum).name}); {obs.get('message') or ''}".strip()
            if args.out:
                _write(args.out, obs)
            print(f"conformance ladder: interrupted{f'; the observation is in {args.out}' if args.out else ''}",
                  file=sys.stderr)
            return stop.exit_code
    print_table(obs)
    if args.out:
        _write(args.out, obs)
    if obs["status"] != "ok":
        print(inert(f"conformance ladder: {obs['engine']['name']} {obs['status']} on {obs['case_id']}:\n{obs['message']}"),
              file=sys.stderr)
        return 1
    from conformance.checks.check_table import judge_live

    verdicts = judge_live(obs, case.spec)
    for v in verdicts:
        print(inert(f"{v.check} [{v.engine} on {v.case_id}]: {v.outcome}: {v.message}"))
    return 1 if any(v.failed for v in verdicts) else 0
