"""The terminal summary of a run: the cases x engines matrix and the failed checks (rich). Whatever an
engine or a file supplied is printed through `console_text.shown`: escape sequences never reach the terminal.

With expectations (`conformance.checks.expectations`), three lists apart: new failures (`FAIL`, they fail
the run), unexpected passes (`XPASS`, they fail the run: remove the entry) and expected failures
(`XFAIL`, with the entry's reason and link); entries that matched no verdict are named as unused."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from conformance.checks.expectations import classify
from conformance.checks.verdicts import MISSING_GOLDEN
from conformance.report.console_text import shown
from conformance.report.families import cell_families
from conformance.report.model import OUTCOMES, RunReport, cell_outcome, outcome_counts

STYLES = {"pass": "bold green", "fail": "bold red", "finding": "bold blue", "refused": "yellow",
          "error": "bold magenta", "not run": "dim"}
MAX_LISTED_FAILURES = 40


def print_summary(console: Console, report: RunReport, index: Path | None = None, junit: Path | None = None) -> None:
    table = Table(title=f"conformance run {shown(report.run_id)}" + (" (interrupted)" if report.interrupted else ""))
    table.add_column("case", overflow="fold")
    engines = report.matrix_engines
    for e in engines:   # full names: a column folds its header, never cuts it
        table.add_column(shown(f"{e.name} {e.version or ''}".strip()), justify="center", overflow="fold")
    for case in report.cases:
        cells = []
        for e in engines:
            outcome = cell_outcome(report, case.id, e.name)
            status = (report.observation(case.id, e.name) or {}).get("status")
            families = cell_families(report.verdicts_of(case.id, e.name), status) if outcome in ("fail", "finding") else []
            cells.append(f"[{STYLES[outcome]}]{outcome}[/]" + (f" ({', '.join(families)})" if families else ""))
        table.add_row(shown(case.id), *cells)
    console.print(table)
    for e in report.engines:
        if e.state != "planned":
            console.print(f"[dim]{shown(e.name)}: {shown(e.state)}: {shown(e.note)}[/]")
    failed = [v for v in report.verdicts if v.failed]
    sorted_verdicts = classify(report.verdicts, report.expectations, report.oracles)
    new_failures = list(sorted_verdicts.new_failures)
    no_golden = [v for v in new_failures if v.cause == MISSING_GOLDEN]
    if no_golden:
        engines_missing = sorted({v.engine for v in no_golden if v.check.endswith(".golden")})
        console.print(f"[red]FAIL[/] {len(no_golden)} check(s) have no golden to compare with"
                      + (f" (record them: pytest suites --engines {shown(','.join(engines_missing))} --snapshot-update)"
                         if engines_missing else ""))
    listed = [v for v in new_failures if v.cause != MISSING_GOLDEN]
    if report.expectations:
        console.print(f"[bold]new failures: {len(new_failures)}[/] (not in the expectations: they fail the run)")
    for v in listed[:MAX_LISTED_FAILURES]:
        console.print(f"[red]FAIL[/] {shown(v.engine)} {shown(v.case_id)} {shown(v.check)}: "
                      f"{shown(v.message.splitlines()[0] if v.message else '')}")
    if len(listed) > MAX_LISTED_FAILURES:
        console.print(f"... and {len(listed) - MAX_LISTED_FAILURES} more failed checks (see the report)")
    if report.expectations:
        _print_expectations(console, sorted_verdicts)
    for v in sorted_verdicts.findings:
        console.print(f"[blue]FINDING[/] about the oracle {shown(v.engine)} {shown(v.case_id)} {shown(v.check)} "
                      f"(not a failure): {shown(v.message.splitlines()[0] if v.message else '')}")
    for case in report.cases:
        for e in engines:
            obs = report.observation(case.id, e.name)
            if obs is not None and obs["status"] == "error":
                first = (obs["message"] or "").strip().splitlines()
                console.print(f"[magenta]ERROR[/] {shown(e.name)} {shown(case.id)}: "
                              f"{shown(first[0] if first else '')}")
    counts = outcome_counts(report)
    console.print(" · ".join(f"{o}: {counts[o]}" for o in OUTCOMES)
                  + f" · checks failed: {len(failed)} of {len(report.verdicts)}"
                  + (f" · expected failures: {len(sorted_verdicts.expected_failures)} · unexpected passes: "
                     f"{len(sorted_verdicts.unexpected_passes)} · new failures: {len(new_failures)}"
                     if report.expectations else ""))
    if index:
        console.print(f"report: {shown(str(index))}")
    if junit:
        console.print(f"junit:  {shown(str(junit))}")


def _print_expectations(console: Console, sorted_verdicts) -> None:
    unexpected = sorted_verdicts.unexpected_passes
    console.print(f"[bold]unexpected passes: {len(unexpected)}[/] (expected to fail, passed: they fail the run)")
    for v, entry in unexpected[:MAX_LISTED_FAILURES]:
        console.print(f"[red]XPASS[/] {shown(v.engine)} {shown(v.case_id)} {shown(v.check)}: expected to fail: "
                      f"{shown(entry.describe())}; now passes: remove the entry")
    expected = sorted_verdicts.expected_failures
    console.print(f"[bold]expected failures: {len(expected)}[/] (known, in the expectations: they do not fail the run)")
    for v, entry in expected[:MAX_LISTED_FAILURES]:
        console.print(f"[yellow]XFAIL[/] {shown(v.engine)} {shown(v.case_id)} {shown(v.check)}: "
                      f"{shown(entry.reason)} ({shown(entry.link)})")
    if len(expected) > MAX_LISTED_FAILURES:
        console.print(f"... and {len(expected) - MAX_LISTED_FAILURES} more expected failures (see the report)")
    for entry in sorted_verdicts.unused:
        console.print(f"[dim]unused expectation {shown(entry.source)} ({shown(entry.check)} on "
                      f"{shown(entry.case)}): no verdict of this run matches it[/]")
