"""`conformance run`: plan the selected cases on every available engine and write the run directory.

Contract: `run_job(options, console)` returns the exit status of `job.exit_status` (0 every check
passed or failed only as its expectations say, 1 a new failure or an unexpected pass, 3 an engine
errored), 128 + the signal when interrupted (130 for SIGINT, 143 for SIGTERM: both are handled
alike, and further signals are ignored while the report is written; `job.interrupt`); bad input
raises `ConformanceError` (exit 2) before the run directory is made. Whatever happens, the run directory
holds `observations.jsonl` (each observation appended as it arrives), `run.json`, a valid
`index.html` and `junit.xml` of what was measured (the rest marked not run), and `latest` points
at it. The run directory is made under `reports_root`, default `reports/` of the working directory
(never the framework checkout's unless run from there); engines under test read their own goldens
from `goldens_dir` when given (oracles' stay the framework's). Engines run one after the other, one adapter process per engine for all cases
(`plan_cases`); an oracle whose venv is not cached is built first, or skipped with `no_build`.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from conformance import observation
from conformance.cases import Case
from conformance.harness.engine_file import EngineFile
from conformance.harness.plan_runner import plan_cases
from conformance.errors import OracleEnvError
from conformance.job import rundir
from conformance.job.interrupt import Interrupts
from conformance.job.summary import print_summary
from conformance.report.junit import write_junit
from conformance.job.exit_status import run_exit_status
from conformance.report.model import RunReport
from conformance.report.render import write_html


@dataclass(frozen=True)
class RunOptions:
    case_patterns: tuple[str, ...] = ()
    engines: str | None = None
    reports_root: Path | None = None
    no_build: bool = False
    cases_dir: Path | None = None
    expectations: tuple[Path, ...] = ()      # expectations files (conformance.expectations)
    goldens_dir: Path | None = None          # engines under test's goldens (oracles' stay the framework's)


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def _meta(run_dir: Path, selection: str, cases: Sequence[Case], engines: list[dict[str, Any]],
          started_at: str, finished_at: str | None = None, interrupted: bool = False,
          judged_with: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"run_id": run_dir.name, "started_at": started_at, "finished_at": finished_at,
            "interrupted": interrupted, "selection": selection, "engines": engines,
            "cases": [{"id": c.id, "digest": c.digest(), "source": str(c.path), "spec": c.spec} for c in cases],
            **(judged_with or {})}


def _prepare(spec: EngineFile, no_build: bool, say) -> tuple[str, str]:
    """(state, note) of an engine before planning: planned | skipped | failed."""
    if not spec.uses_venv:
        return "planned", ""
    from conformance.envs import install, oracle_env

    env = oracle_env(spec)
    if env.state() != "ready":
        if no_build:
            return "skipped", f"venv {env.path} is {env.state()} and --no-build was given"
        say(f"{spec.name}: building its pinned venv ({env.state()})")
    try:
        install(spec, progress=lambda m: say(m))
    except OracleEnvError as exc:
        return "failed", f"its environment could not be built: {str(exc).splitlines()[0]}"
    return "planned", ""


def run_job(options: RunOptions, console: Console) -> int:
    from conformance.job.selection import select_cases, select_engines

    from conformance.expectations import load_expectations

    cases, selection = select_cases(list(options.case_patterns), options.cases_dir)
    specs = select_engines(options.engines)
    expectations = load_expectations(options.expectations)
    goldens_dir = _goldens_dir(options.goldens_dir)
    names = [s.name for s in specs]
    reports_root = Path(options.reports_root) if options.reports_root else _default_reports_root()
    run_dir = rundir.new_run_dir(reports_root)
    started = _stamp()
    engines = [{"name": s.name, "version": s.resolved_version, "role": s.role, "defects": list(s.defects),
                "path": str(s.path), "state": "pending", "note": ""} for s in specs]
    judged_with = {"expectations": [e.to_json() for e in expectations],
                   "goldens_dir": str(goldens_dir) if goldens_dir else None}
    meta = lambda finished=None, interrupted=False: _meta(  # noqa: E731
        run_dir, selection, cases, engines, started, finished, interrupted, judged_with)
    rundir.write_json_atomic(run_dir / rundir.RUN_FILE, meta())
    console.print(f"conformance run {escape(run_dir.name)}: {len(cases)} case(s) x {len(names)} engine(s) "
                  f"· selection: {escape(selection)} -> {escape(str(run_dir))}")
    log = rundir.ObservationLog(run_dir)
    with Interrupts() as stop:
        try:
            with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), console=console) as progress:
                tasks = {n: progress.add_task(f"{n}: waiting", total=len(cases)) for n in names}
                for entry, spec in zip(engines, specs):
                    _run_engine(entry, spec, cases, options.no_build, run_dir, log, progress, tasks[entry["name"]])
                    rundir.write_json_atomic(run_dir / rundir.RUN_FILE, meta())
        except KeyboardInterrupt:
            stop.hold()
            name = signal.Signals(stop.signum).name if stop.signum else "SIGINT"
            console.print(f"[yellow]interrupted ({name}): writing the report of what was measured[/]")
        finally:
            stop.hold()
            log.close()
        interrupted = stop.signum is not None or _interrupted_without_signal(engines)
        for entry in engines:
            if entry["state"] == "running":
                entry["state"], entry["note"] = "interrupted", "interrupted while planning: its observations so far are kept"
            elif entry["state"] == "pending":
                entry["state"], entry["note"] = "not run", "the run was interrupted before this engine"
        rundir.write_json_atomic(run_dir / rundir.RUN_FILE, meta(_stamp(), interrupted))
        report = finish(run_dir, console)
        rundir.point_latest(reports_root, run_dir)
    if interrupted:
        return stop.exit_code or 130
    return run_exit_status(report)


def _interrupted_without_signal(engines: list[dict[str, Any]]) -> bool:
    """A KeyboardInterrupt raised by Python itself (no handler installed: not the main thread)."""
    return any(e["state"] in ("pending", "running") for e in engines)


def _run_engine(entry: dict[str, Any], spec: EngineFile, cases: Sequence[Case], no_build: bool, run_dir: Path,
                log: rundir.ObservationLog, progress: Progress, task) -> None:
    say = lambda m: progress.console.print(f"[dim]{escape(m)}[/]")  # noqa: E731
    progress.update(task, description=f"{spec.name}: preparing")
    entry["state"] = "running"
    state, note = _prepare(spec, no_build, say)
    entry["state"], entry["note"] = state, note
    if state == "skipped":
        progress.update(task, description=f"{spec.name}: skipped ({note})", completed=len(cases))
        return
    t0 = time.monotonic()

    def arrived(obs: dict[str, Any]) -> None:
        log.append(obs)
        progress.advance(task)
        first = (obs.get("message") or "").strip().splitlines()
        progress.console.print(f"  {escape(spec.name):<10} {escape(obs['case_id']):<40} {escape(obs['status']):<8} "
                               f"[dim]{escape(first[0][:100]) if first and obs['status'] != 'ok' else ''}[/]",
                               no_wrap=True, overflow="ellipsis", crop=True)
        progress.update(task, description=f"{spec.name}: {obs['case_id']}")

    if state == "failed":
        for case in cases:
            arrived(observation.failed(case.id, spec.name, spec.resolved_version, "plan",
                                       case.spec["device"], "error", f"{spec.name}: {note}"))
        return
    progress.update(task, description=f"{spec.name}: planning")
    entry["state"] = "running"   # "planned" only once every case is (an interrupt here leaves "interrupted")
    plan_cases(spec, cases, on_observation=arrived, log_dir=run_dir / "logs" / spec.name)
    entry["state"] = "planned"
    progress.update(task, description=f"{spec.name}: done in {time.monotonic() - t0:.0f} s")


def _default_reports_root() -> Path:
    from conformance import paths

    return paths.reports_dir()


def _goldens_dir(path: Path | None) -> Path | None:
    """`--goldens-dir`, absolute; a path that exists and is not a directory is bad input."""
    if path is None:
        return None
    from conformance.errors import ConformanceError

    path = Path(path).expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise ConformanceError(f"--goldens-dir {path}: not a directory")
    return path


def finish(run_dir: Path, console: Console | None = None) -> RunReport:
    """Judge, render `index.html` and `junit.xml` from the run directory, print the summary."""
    report = rundir.load_report(run_dir)
    index = write_html(report, run_dir / rundir.INDEX_FILE)
    junit = write_junit(report, run_dir / rundir.JUNIT_FILE)
    if console is not None:
        print_summary(console, report, index, junit)
    return report
