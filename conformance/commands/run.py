"""`conformance run`: the main job. Plans the default matrix (or `--cases`) on every available engine,
judges it with the suites' rules, and writes `reports/<run-id>/` (observations.jsonl, index.html,
junit.xml) and `reports/latest`.

Exit status: 0 when every parity check passed and no engine errored; 1 when a check failed or an
engine errored; 2 for a bad case, engine or option; 130 when interrupted by SIGINT, 143 by SIGTERM
(either way the partial report, junit.xml and latest are still written).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from conformance.harness.registry import known_names
from conformance.job.execute import RunOptions, run_job
from conformance.job.selection import DEFAULT_SELECTION

NAME = "run"
HELP = "run the parity matrix on every available engine and write the HTML report"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cases", nargs="+", metavar="GLOB", default=[],
                   help=f"case id globs or case files (default: {DEFAULT_SELECTION.describe()})")
    p.add_argument("--engines", metavar="LIST", help=f"comma list of engine names or engine files (default: all of {', '.join(known_names())})")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="reports directory (default reports/): writes DIR/<run-id>/ and DIR/latest")
    p.add_argument("--no-build", action="store_true",
                   help="skip an oracle whose venv is not cached instead of building it")
    p.add_argument("--cases-dir", type=Path, help="case directory (default suites/cases)")
    p.add_argument("--live", action="store_true",
                   help="serve the live cases (default: tag live) on every engine with a `live:` section, oracles "
                        "first, and judge them with the live checks (a GPU host for cuda cases)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="live: override a manifest placeholder (e.g. vllm=DIR/bin/vllm)")
    p.add_argument("--oracle-pack", action="append", default=[], type=Path, metavar="DIR",
                   help="live: an oracle installed from `conformance envs pack`: its versions and its deviations "
                        "from the oracle's defaults go into the observation's provenance")


def run(args: argparse.Namespace) -> int:
    from conformance.commands.ladder import _overrides

    options = RunOptions(case_patterns=tuple(args.cases), engines=args.engines, reports_root=args.out,
                         no_build=args.no_build, cases_dir=args.cases_dir, live=args.live,
                         overrides=tuple(_overrides(args.set).items()), packs=tuple(args.oracle_pack))
    return run_job(options, Console(stderr=False))
