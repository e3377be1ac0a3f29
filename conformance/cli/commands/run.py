"""`conformance run`: the main job. Plans the default matrix (or `--cases`) on every available engine,
judges it with the suites' rules, and writes `reports/<run-id>/` (observations.jsonl, verdicts.jsonl, index.html,
junit.xml) and `reports/latest`, under the working directory (or `--reports-dir`).

Exit status (`conformance.run.exit_status`, stable): 0 every check passed, or failed only where
`--expectations` says it is known to; 1 a check failed that no expectation names, or an expected
failure passed; 2 bad input (a case, engine file, expectations file or option); 3 an engine errored
(crashed, hung, wrote no observation, or its environment could not be built; wins over 1); 130 when
interrupted by SIGINT, 143 by SIGTERM (either way the partial report, junit.xml and latest are still
written).
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

from rich.console import Console

from conformance.engines.registry import known_names
from conformance.run.execute import RunOptions, run_job
from conformance.run.selection import DEFAULT_SELECTION

NAME = "run"
HELP = "run the parity matrix on every available engine and write the HTML report"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cases", nargs="+", metavar="GLOB", default=[],
                   help=f"case id globs or case files (default: {DEFAULT_SELECTION.describe()})")
    p.add_argument("--engines", metavar="LIST", help=f"comma list of engine names or engine files (default: all of {', '.join(known_names())})")
    p.add_argument("--reports-dir", "--out", dest="out", type=Path, metavar="DIR",
                   help="reports directory (default reports/ of the working directory): writes DIR/<run-id>/ "
                        "and DIR/latest")
    p.add_argument("--expectations", action="append", type=Path, default=[], metavar="FILE",
                   help="an engine's known failures (YAML; conformance/documents/schemas/expectations.schema.json): they do "
                        "not fail the run, an expected failure that passes does (repeatable)")
    p.add_argument("--goldens-dir", type=Path, metavar="DIR",
                   help="where engines under test keep their goldens (DIR/<suite>/...; record them with "
                        "`pytest suites/ --engines E --goldens-dir DIR --snapshot-update`); oracles' stay the framework's")
    p.add_argument("--no-build", action="store_true",
                   help="skip an oracle whose venv is not cached instead of building it")
    p.add_argument("--cases-dir", type=Path, help="case directory (default suites/cases)")
    p.add_argument("--live", action="store_true",
                   help="serve the live cases (default: tag live) on every engine with a `live:` section, oracles "
                        "first, and judge them with the live checks (a GPU host for cuda cases)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="live: override a manifest placeholder (e.g. vllm=DIR/bin/vllm)")
    p.add_argument("--live-ladder", metavar="LIST",
                   help="live: serve these concurrencies (e.g. 1,8,32) instead of each case's ladder")
    p.add_argument("--shard", metavar="I/N",
                   help="plan only the I-th of N shards of the (engine, case, device) matrix (a stable hash of "
                        "each cell, the same as `pytest suites/ --shard I/N`; conformance.run.shard)")
    p.add_argument("--history", metavar="URL",
                   help="the results store the run is appended to: sqlite:////ABS/PATH, a file path or a postgresql:// "
                        "URL (default: history.sqlite beside the run directories)")
    p.add_argument("--no-history", action="store_true", help="append the run to no results store")
    p.add_argument("--oracle-pack", action="append", default=[], type=Path, metavar="DIR",
                   help="live: an oracle installed from `conformance envs pack`: its versions and its deviations "
                        "from the oracle's defaults go into the observation's provenance")


def run(args: argparse.Namespace) -> int:
    from conformance.engines.manifest import placeholder_overrides
    from conformance.errors import ConformanceError
    from conformance.documents.live_spec import parse_ladder
    from conformance.nightly.history import record_finished_run
    from conformance.run.shard import parse_shard

    try:
        ladder = parse_ladder(args.live_ladder, "--live-ladder") if args.live_ladder else None
    except ValueError as exc:
        raise ConformanceError(str(exc)) from None
    history = None if args.no_history else partial(record_finished_run, url=args.history)
    options = RunOptions(live_ladder=ladder, case_patterns=tuple(args.cases), engines=args.engines, reports_root=args.out,
                         no_build=args.no_build, cases_dir=args.cases_dir, live=args.live,
                         overrides=tuple(placeholder_overrides(args.set).items()), packs=tuple(args.oracle_pack),
                         expectations=tuple(args.expectations), goldens_dir=args.goldens_dir,
                         shard=parse_shard(args.shard), after_report=history)
    return run_job(options, Console(stderr=False))
