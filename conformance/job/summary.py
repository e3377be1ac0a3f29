"""The terminal summary of a run: the cases x engines matrix and the failed checks (rich). Whatever an
engine or a file supplied is printed through `console_text.shown`: escape sequences never reach the terminal."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from conformance.console_text import shown
from conformance.report.model import OUTCOMES, RunReport, cell_outcome, outcome_counts
from conformance.verdicts import MISSING_GOLDEN

STYLES = {"pass": "bold green", "fail": "bold red", "refused": "yellow", "error": "bold magenta",
          "not run": "dim"}
MAX_LISTED_FAILURES = 40


def print_summary(console: Console, report: RunReport, index: Path | None = None, junit: Path | None = None) -> None:
    table = Table(title=f"conformance run {shown(report.run_id)}" + (" (interrupted)" if report.interrupted else ""))
    table.add_column("case")
    engines = report.matrix_engines
    for e in engines:
        table.add_column(shown(f"{e.name} {e.version or ''}".strip()), justify="center")
    for case in report.cases:
        cells = []
        for e in engines:
            outcome = cell_outcome(report, case.id, e.name)
            cells.append(f"[{STYLES[outcome]}]{outcome}[/]")
        table.add_row(shown(case.id), *cells)
    console.print(table)
    for e in report.engines:
        if e.state != "planned":
            console.print(f"[dim]{shown(e.name)}: {shown(e.state)}: {shown(e.note)}[/]")
    failed = [v for v in report.verdicts if v.failed]
    no_golden = [v for v in failed if v.cause == MISSING_GOLDEN]
    if no_golden:
        engines_missing = sorted({v.engine for v in no_golden if v.check.endswith(".golden")})
        console.print(f"[red]FAIL[/] {len(no_golden)} check(s) have no golden to compare with"
                      + (f" (record them: pytest suites --engines {shown(','.join(engines_missing))} --snapshot-update)"
                         if engines_missing else ""))
    listed = [v for v in failed if v.cause != MISSING_GOLDEN]
    for v in listed[:MAX_LISTED_FAILURES]:
        console.print(f"[red]FAIL[/] {shown(v.engine)} {shown(v.case_id)} {shown(v.check)}: "
                      f"{shown(v.message.splitlines()[0] if v.message else '')}")
    if len(listed) > MAX_LISTED_FAILURES:
        console.print(f"... and {len(listed) - MAX_LISTED_FAILURES} more failed checks (see the report)")
    for case in report.cases:
        for e in engines:
            obs = report.observation(case.id, e.name)
            if obs is not None and obs["status"] == "error":
                first = (obs["message"] or "").strip().splitlines()
                console.print(f"[magenta]ERROR[/] {shown(e.name)} {shown(case.id)}: "
                              f"{shown(first[0] if first else '')}")
    counts = outcome_counts(report)
    console.print(" · ".join(f"{o}: {counts[o]}" for o in OUTCOMES)
                  + f" · checks failed: {len(failed)} of {len(report.verdicts)}")
    if index:
        console.print(f"report: {shown(str(index))}")
    if junit:
        console.print(f"junit:  {shown(str(junit))}")
