"""`conformance merge RUN_DIR... [--out DIR]`: one report of every host's runs (shards of a nightly).

Each RUN_DIR is a run directory, or an http(s) URL of a CI artifact (a .tar.gz / .zip of one);
`conformance.nightly.merge` says what is written. Runs judged against different goldens revisions
(or other goldens than this checkout's, which judges the merged report) are refused unless
`--allow-mixed-goldens`.

Exit status: as `conformance run` for the merged verdicts (0 pass, 1 a new failure or an unexpected
pass, 3 an engine errored); 2 bad input: a source that is no run directory, an archive that cannot be
read, mixed goldens revisions.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

NAME = "merge"
HELP = "merge run directories of many hosts (shards) into one report"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories, or http(s) URLs of .tar.gz / .zip "
                   "artifacts of run directories")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="the merged run directory (default: reports/<run-id> of the working directory)")
    p.add_argument("--allow-mixed-goldens", action="store_true",
                   help="merge runs judged against different goldens revisions (judged here against this checkout's)")


def run(args: argparse.Namespace) -> int:
    from conformance import paths
    from conformance.run.exit_status import run_exit_status
    from conformance.run.rundir import new_run_dir
    from conformance.nightly.merge import merge_runs

    out = args.out if args.out is not None else new_run_dir(paths.reports_dir())
    report = merge_runs(args.runs, out, args.allow_mixed_goldens, Console())
    return run_exit_status(report)
