"""`conformance report DIR`: judge DIR/observations.jsonl again against the goldens as they are now (with
the roles and goldens directory DIR/run.json records), store the verdicts in DIR/verdicts.jsonl and
re-render DIR/index.html and DIR/junit.xml from them.

Exit status: 0 when the report was written (whatever its verdicts), 1 when it could not be written
(a full disk: what was there is left whole), 2 when DIR holds no usable observations.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from conformance.run.execute import finish

NAME = "report"
HELP = "re-render the HTML parity report of a run directory"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", type=Path, metavar="DIR", help="a run directory (reports/<run-id> or reports/latest)")


def run(args: argparse.Namespace) -> int:
    from conformance.errors import RunDirWriteError
    from conformance.run.rundir import resolve_run_dir

    run_dir = resolve_run_dir(args.dir)
    try:
        finish(run_dir, Console())
    except OSError as exc:   # a full disk: the files already there are left whole (written atomically)
        raise RunDirWriteError(f"could not write {exc.filename or run_dir}: {exc.strerror or exc}; "
                               f"{run_dir} is unchanged") from None
    return 0
