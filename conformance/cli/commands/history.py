"""`conformance history`: every figure's series across commits and its change points.

    conformance history [--history URL] [--record RUN_DIR]... [--engine E] [--case C] [--device D]
                        [--figure F] [--html FILE]

The store (`nightly.history_store`) is `--history URL` (sqlite:////ABS/PATH, a path, or postgresql://...),
default reports/history.sqlite of the working directory, where `conformance run` appends each run.
`--record` appends run directories first (a run made where the store was not reachable). Filters are
globs. A change point is a commit whose figures' interval lies wholly outside the noise band
(`nightly.changes`: the live checks' statistics). Exit status: 0 printed (whatever the changes), 2 bad
input (a store that cannot be opened, a run directory that is no run).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

NAME = "history"
HELP = "print each figure's series across commits and its change points"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--history", metavar="URL", help="the results store: sqlite:////ABS/PATH, a file path, or a "
                   "postgresql:// URL (default: reports/history.sqlite of the working directory)")
    p.add_argument("--record", action="append", type=Path, default=[], metavar="RUN_DIR",
                   help="append this run directory to the store first (repeatable)")
    p.add_argument("--engine", metavar="GLOB")
    p.add_argument("--case", metavar="GLOB")
    p.add_argument("--device", metavar="GLOB", help="device profile (h200, ...)")
    p.add_argument("--figure", metavar="GLOB", help="e.g. 'c=4 output tok/s' or 'memory.*'")
    p.add_argument("--html", type=Path, metavar="FILE", help="also write the trend view (an inline SVG per series)")


def run(args: argparse.Namespace) -> int:
    from conformance import paths
    from conformance.run.rundir import resolve_run_dir
    from conformance.nightly.history import print_history, selected_series
    from conformance.nightly.history_store import default_url, open_store
    from conformance.nightly.trend import write_trend

    console = Console(highlight=False, soft_wrap=True)
    url = args.history or default_url(paths.reports_dir())
    with open_store(url) as store:
        for run_dir in args.record:
            key = store.record_run(resolve_run_dir(run_dir))
            console.print(f"recorded {key}")
        items = selected_series(store, args.engine, args.case, args.device, args.figure)
    print_history(console, items)
    if args.html:
        console.print(f"trend view: {write_trend(args.html, items, 'Conformance history')}")
    return 0
