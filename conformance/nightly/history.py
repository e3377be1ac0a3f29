"""Reading the history: the series a filter selects, their change points, printed and drawn.

Contract: `selected_series(store, engine, case, device, figure)` gives every stored series whose keys
match the globs (None: any) with its change points (`nightly.changes`); `print_history(console, items)`
prints each series commit by commit (samples, geometric mean, ratio to the segment before, the change
points); `record_and_trend(run_dir, report, url, console)` is what `conformance run` does after a run:
append it to the store and write `history.html` (the trend view of the series of the run's engines and
cases) into the run directory.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Sequence

from rich.console import Console

from conformance.nightly.changes import Change, Series, change_points, series_of
from conformance.nightly.history_store import Store, default_url, open_store
from conformance.report.console_text import shown

TREND_FILE = "history.html"


def _match(value: str, glob: str | None) -> bool:
    return glob is None or fnmatch.fnmatchcase(value, glob)


def selected_series(store: Store, engine: str | None = None, case: str | None = None, device: str | None = None,
                    figure: str | None = None) -> list[tuple[Series, list[Change]]]:
    out = []
    for s in series_of(store.samples()):
        if _match(s.engine, engine) and _match(s.case_id, case) and _match(s.device, device) and _match(s.figure, figure):
            out.append((s, change_points(s)))
    return out


def print_history(console: Console, items: Sequence[tuple[Series, Sequence[Change]]]) -> None:
    for series, changes in items:
        lo, hi = series.band()
        console.print(f"[bold]{shown(series.label())}[/]  noise band [{lo:.3g}, {hi:.3g}]"
                      f"{' (less is better)' if series.upper else ' (more is better)'}")
        by_index = {c.index: c for c in changes}
        for i, p in enumerate(series.points):
            c = by_index.get(i)
            mark = f"  [{'red' if c.kind == 'regression' else 'green'}]<- {c.kind}: {c.interval.text()} against " \
                   f"{shown(c.since[:12])}..[/]" if c else ""
            console.print(f"  {shown(p.commit[:12]):<12}  n={len(p.samples):<3} {p.geomean:>14.6g}{mark}", highlight=False)
        if not changes:
            console.print("  no change point", highlight=False)
    total = sum(len(c) for _, c in items)
    console.print(f"{len(items)} series, {total} change point(s)"
                  + (": " + "; ".join(f"{s.label()} at {c.commit[:12]} ({c.kind})" for s, cs in items for c in cs)
                     if total else ""), highlight=False)


def record_finished_run(run_dir: Path, report, console: Console, url: str | None = None) -> None:
    """Append a finished `conformance run` to the results store `url` (default: history.sqlite beside its run
    directory) and write its trend view. A store that cannot be written is said, naming it, and the run's own
    verdicts and exit status stand (`conformance history --record DIR` appends it later)."""
    url = url or default_url(Path(run_dir).parent)
    try:
        record_and_trend(run_dir, report, url, console)
    except Exception as exc:  # noqa: BLE001 -- a store's failure must not lose the run
        console.print(f"[red]history: could not record the run in {shown(url)}: {shown(type(exc).__name__)}: "
                      f"{shown(str(exc)[:300])}; append it later with `conformance history --history URL --record "
                      f"{shown(str(run_dir))}`[/]")


def record_and_trend(run_dir: Path, report, url: str, console: Console) -> None:
    from conformance.nightly.trend import write_trend

    with open_store(url) as store:
        store.record_run(run_dir, report)
        cells = {(e, c) for (c, e) in report.observations}
        items = [(s, ch) for s, ch in selected_series(store) if (s.engine, s.case_id) in cells]
        num_runs = store.num_runs()
    write_trend(Path(run_dir) / TREND_FILE, items, f"History of run {report.run_id}'s series")
    console.print(f"history: recorded in {shown(url)} ({num_runs} run(s)); trend view "
                  f"{shown(str(Path(run_dir) / TREND_FILE))}: {sum(len(c) for _, c in items)} change point(s)")
