"""`conformance plan --engine E --cases C`: one engine's plan-mode observation(s), as JSON on stdout.

`--cases` is the selection of every face (`run.selection`: case ids, globs over them, `tag:NAME`, case
files; repeatable, or a comma list); `--case` is the same option. A live case may be named too.

Exit status: 0 when every observation is ok or refused (a refusal is data), 1 when any is an
error, 2 for a bad case, engine or option.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

from conformance.documents.cases import Case, parse_case
from conformance.engines.registry import known_names
from conformance.errors import ConformanceError
from conformance.report.console_text import inert
from conformance.run import session
from conformance.run.selection import ANY_POOL

NAME = "plan"
HELP = "plan cases on one engine and print the observations (JSON)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", required=True, help=f"a shipped engine ({', '.join(known_names())}) or a path to an engine file")
    p.add_argument("--cases", "--case", dest="cases", action="extend", nargs="+", required=True, metavar="PATTERN",
                   help="case ids, globs over them, tag:NAME or case files (repeatable, or a comma list)")
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
    opened = session.open_session(args.cases, args.engine, live=ANY_POOL)
    if len(opened.engines) != 1:
        raise ConformanceError(f"--engine {args.engine}: one engine is planned at a time")
    cases = [synchronous(c) for c in opened.cases] if args.sync_scheduling else list(opened.cases)
    observations = session.plan(opened.engines[0], cases, lambda m: print(m, file=sys.stderr, flush=True),
                                log_dir=args.log_dir)
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
