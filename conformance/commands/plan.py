"""`conformance plan --engine E --case C`: one engine's plan-mode observation(s), as JSON on stdout.

Exit status: 0 when every observation is ok or refused (a refusal is data), 1 when any is an
error, 2 for a bad case, engine or option.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

from conformance.cases import Case, find_case, parse_case
from conformance.console_text import inert
from conformance.harness.plan_runner import plan_cases
from conformance.harness.registry import known_names, resolve_engine

NAME = "plan"
HELP = "plan cases on one engine and print the observations (JSON)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", required=True, help=f"a shipped engine ({', '.join(known_names())}) or a path to an engine file")
    p.add_argument("--case", action="append", required=True, help="case id or path to a case file (repeatable)")
    p.add_argument("--out", type=Path, help="also write the observations here (JSON lines)")
    p.add_argument("--log-dir", type=Path, help="keep the adapter's logs here")
    p.add_argument("--sync-scheduling", action="store_true",
                   help="plan with scheduler.async_scheduling false (the synchronous engine's trace) "
                        "instead of the device profile's GPU default")


def synchronous(case: Case) -> Case:
    """The case with scheduler.async_scheduling false (validated again as any case file is)."""
    spec = copy.deepcopy(case.spec)
    spec["scheduler"]["async_scheduling"] = False
    return parse_case(spec, case.path)


def run(args: argparse.Namespace) -> int:
    spec = resolve_engine(args.engine)
    cases = [find_case(ref) for ref in args.case]
    if args.sync_scheduling:
        cases = [synchronous(c) for c in cases]
    if spec.uses_venv:
        from conformance.envs import install

        install(spec, progress=lambda m: print(m, file=sys.stderr, flush=True))
    observations = plan_cases(spec, cases, log_dir=args.log_dir)
    doc = observations[0] if len(observations) == 1 else observations
    print(json.dumps(doc, indent=2, sort_keys=True))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as fh:
            for o in observations:
                fh.write(json.dumps(o, sort_keys=True) + "\n")
    for o in observations:
        if o["status"] == "error":
            print(inert(f"conformance plan: {o['engine']['name']} failed on {o['case_id']}: "
                        f"{o['message'].splitlines()[0]}"), file=sys.stderr)
    return 1 if any(o["status"] == "error" for o in observations) else 0
