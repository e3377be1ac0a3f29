"""`conformance run`: plan the selected cases on every available engine and write the run directory.

Contract: `run_job(options, console)` returns the exit status of `run.exit_status` (0 every check
passed or failed only as its expectations say, 1 a new failure or an unexpected pass, and when nothing
was planned: every engine skipped, said so with each engine's reason; 3 an engine errored), 128 + the
signal when interrupted (130 for SIGINT, 143 for SIGTERM: both are handled alike, and further signals
are ignored while the report is written; `run.interrupt`); bad input raises `ConformanceError` (exit 2)
before the run directory is made. Whatever happens, the run directory
holds `observations.jsonl` (each observation appended as it arrives), `run.json`, a valid
`index.html` and `junit.xml` of what was measured (the rest marked not run), and `latest` points
at it. A write into the run directory that fails (a full disk) stops planning and raises
`RunDirWriteError` saying what is kept (every observation already appended) and how to finish
(`conformance report DIR`); index.html and junit.xml are written atomically, so a full disk never
leaves half of one. The run directory is made under `reports_root`, default `reports/` of the working
directory (never the framework checkout's unless run from there); engines under test read their own
goldens from `goldens_dir` when given (oracles' stay the framework's). With `live`, the live cases are
served (`harness.live_measure`) instead of planned, oracles first. Engines run one after the other, one adapter process per engine for all cases
(`plan_cases`); an oracle whose venv is not cached is built first, or skipped with `no_build`. Cases, engines,
environments and judging come from the run session (`run.session`); `finish` judges the run directory and
stores its verdicts before it renders them.
"""

from __future__ import annotations

import errno
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from conformance.documents import observation
from conformance.documents.cases import Case
from conformance.engines.engine_file import EngineFile
from conformance.errors import OracleEnvError, RunDirWriteError
from conformance.harness.engine_version import resolved_version
from conformance.harness.plan_runner import plan_cases
from conformance.report.atomic import write_atomic
from conformance.report.console_text import shown
from conformance.report.fallback import fallback_html, fallback_junit
from conformance.report.junit import write_junit
from conformance.report.model import RunReport
from conformance.report.render import write_html
from conformance.run import rundir, session
from conformance.run.exit_status import run_exit_status
from conformance.run.interrupt import Interrupts
from conformance.run.provenance import run_provenance
from conformance.run.shard import Shard
from conformance.run.summary import print_summary

AfterReport = Callable[[Path, RunReport, Console], None]   # (run directory, its report, the console)


@dataclass(frozen=True)
class RunOptions:
    case_patterns: tuple[str, ...] = ()
    engines: str | None = None
    reports_root: Path | None = None
    no_build: bool = False
    cases_dir: Path | None = None
    live: bool = False                            # serve the live cases instead of planning (see run_live_engine)
    overrides: tuple[tuple[str, str], ...] = ()   # live: manifest placeholders (KEY=VALUE), e.g. vllm=DIR/bin/vllm
    packs: tuple[Path, ...] = ()                  # live: oracle packs (`conformance envs pack`), by their engine
    live_ladder: tuple[int, ...] | None = None    # live: concurrencies served instead of each case's ladder
    expectations: tuple[Path, ...] = ()      # expectations files (conformance.checks.expectations)
    goldens_dir: Path | None = None          # engines under test's goldens (oracles' stay the framework's)
    shard: Shard | None = None               # plan only this shard's cells (conformance.run.shard)
    after_report: AfterReport | None = None  # then, with the finished run (`conformance run`: its results store)


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
    try:
        skipped = session.install_env(spec, say, no_build)
    except OracleEnvError as exc:
        return "failed", f"its environment could not be built: {str(exc).splitlines()[0]}"
    return ("skipped", skipped) if skipped else ("planned", "")


def run_job(options: RunOptions, console: Console) -> int:
    from conformance.checks.expectations import load_expectations

    opened = session.open_session(options.case_patterns, options.engines, options.cases_dir, live=options.live)
    cases, selection = list(opened.cases), opened.selection
    if options.live and options.live_ladder:
        from conformance.documents.live_spec import with_ladder

        cases = [with_ladder(c, options.live_ladder) for c in cases]
        selection += f" on the ladder {','.join(map(str, options.live_ladder))}"
    specs = list(opened.engines)
    if options.live:   # oracles first: an engine under test is compared with them as measured in this run
        specs = sorted(specs, key=lambda s: not s.is_oracle)
    expectations = load_expectations(options.expectations)
    goldens_dir = _goldens_dir(options.goldens_dir)
    reports_root = Path(options.reports_root) if options.reports_root else _default_reports_root()
    try:
        run_dir = rundir.new_run_dir(reports_root)
    except OSError as exc:
        raise RunDirWriteError(f"could not create a run directory under {reports_root}: {_why(exc)}") from None
    try:
        return _plan_and_report(options, console, cases, selection, specs, reports_root, run_dir, expectations,
                                goldens_dir)
    except OSError as exc:   # the run directory cannot be written (a full disk): say what is kept
        raise RunDirWriteError(_write_failed(run_dir, exc)) from None


def _plan_and_report(options: RunOptions, console: Console, cases: Sequence[Case], selection: str,
                     specs: list[EngineFile], reports_root: Path, run_dir: Path, expectations: Sequence[Any],
                     goldens_dir: Path | None) -> int:
    names = [s.name for s in specs]
    started = _stamp()
    engines = [{"name": s.name, "version": resolved_version(s), "role": s.role, "defects": list(s.defects),
                "path": str(s.path), "state": "pending", "note": ""} for s in specs]
    judged_with = {"expectations": [e.to_json() for e in expectations],
                   "goldens_dir": str(goldens_dir) if goldens_dir else None,
                   "provenance": run_provenance(goldens_dir, options.shard)}
    meta = lambda finished=None, interrupted=False: _meta(  # noqa: E731
        run_dir, selection, cases, engines, started, finished, interrupted, judged_with)
    rundir.write_json_atomic(run_dir / rundir.RUN_FILE, meta())
    shard = options.shard
    cells = {s.name: [c for c in cases if shard is None or shard.holds(s.name, c.id, c.spec.get("device", ""))]
             for s in specs}
    console.print(f"conformance run {shown(run_dir.name)}: {len(cases)} case(s) x {len(names)} engine(s) "
                  f"· selection: {shown(selection)}"
                  + (f" · shard {shard.text()}: {sum(map(len, cells.values()))} cell(s)" if shard else "")
                  + f" -> {shown(str(run_dir))}")
    log = rundir.ObservationLog(run_dir)
    write_error: OSError | None = None
    with Interrupts() as stop:
        try:
            with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), console=console) as progress:
                tasks = {n: progress.add_task(f"{n}: waiting", total=len(cells[n])) for n in names}
                for entry, spec in zip(engines, specs):
                    mine = cells[spec.name]
                    if not mine:
                        entry["state"], entry["note"] = "skipped", f"none of its cells is in shard {shard.text()}"
                        progress.update(tasks[entry["name"]], description=f"{spec.name}: skipped (not in this shard)")
                    elif options.live:
                        _serve_engine(entry, spec, mine, options, run_dir, log, progress, tasks[entry["name"]])
                    else:
                        _run_engine(entry, spec, mine, options.no_build, run_dir, log, progress, tasks[entry["name"]])
                    rundir.write_json_atomic(run_dir / rundir.RUN_FILE, meta())
        except KeyboardInterrupt:
            stop.hold()
            name = signal.Signals(stop.signum).name if stop.signum else "SIGINT"
            console.print(f"[yellow]interrupted ({name}): writing the report of what was measured[/]")
        except OSError as exc:   # a write into the run directory failed: stop planning, report what is kept
            stop.hold()
            write_error = exc
        finally:
            stop.hold()
            log.close()
        interrupted = stop.signum is not None or _interrupted_without_signal(engines)
        stopped = "its run directory could not be written" if write_error else "the run was interrupted"
        for entry in engines:
            if entry["state"] == "running":
                entry["state"], entry["note"] = "interrupted", f"{stopped} while planning: its observations so far are kept"
            elif entry["state"] == "pending":
                entry["state"], entry["note"] = "not run", f"{stopped} before this engine"
        try:
            rundir.write_json_atomic(run_dir / rundir.RUN_FILE, meta(_stamp(), interrupted))
            report = finish(run_dir, console)
            rundir.point_latest(reports_root, run_dir)
            if options.after_report is not None:
                options.after_report(run_dir, report, console)
        except OSError:
            if write_error is not None:   # the first failure is the one to tell
                raise write_error from None
            raise
    if write_error is not None:
        raise write_error
    if interrupted:
        return stop.exit_code or 130
    if not report.observations:
        console.print(f"[red]nothing was planned[/]: no engine planned any of the {len(cases)} selected case(s): "
                      + "; ".join(f"{shown(e['name'])} {shown(e['state'])}"
                                  + (f" ({shown(e['note'])})" if e["note"] else "") for e in engines))
        return 1
    return run_exit_status(report)


def _why(exc: OSError) -> str:
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    return f"{exc.strerror or exc}" + (" (the disk or the file size limit is full)" if full else "")


def _write_failed(run_dir: Path, exc: OSError) -> str:
    """What a failed write into the run directory means: what is kept, and how to finish the report."""
    kept = 0
    try:
        with (run_dir / rundir.OBSERVATIONS_FILE).open("rb") as fh:
            kept = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
    except OSError:
        pass
    return (f"could not write {exc.filename or run_dir}: {_why(exc)}; the {kept} observation(s) measured before it are "
            f"kept in {run_dir / rundir.OBSERVATIONS_FILE}; free some space and run `conformance report {run_dir}` "
            f"to write its index.html and junit.xml")


def _interrupted_without_signal(engines: list[dict[str, Any]]) -> bool:
    """A KeyboardInterrupt raised by Python itself (no handler installed: not the main thread)."""
    return any(e["state"] in ("pending", "running") for e in engines)


def _run_engine(entry: dict[str, Any], spec: EngineFile, cases: Sequence[Case], no_build: bool, run_dir: Path,
                log: rundir.ObservationLog, progress: Progress, task) -> None:
    say = lambda m: progress.console.print(f"[dim]{shown(m)}[/]")  # noqa: E731
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
        progress.console.print(f"  {shown(spec.name):<10} {shown(obs['case_id']):<40} {shown(obs['status']):<8} "
                               f"[dim]{shown(first[0][:100]) if first and obs['status'] != 'ok' else ''}[/]",
                               no_wrap=True, overflow="ellipsis", crop=True)
        progress.update(task, description=f"{spec.name}: {obs['case_id']}")

    if state == "failed":
        for case in cases:
            arrived(observation.failed(case.id, spec.name, resolved_version(spec), "plan",
                                       case.spec["device"], "error", f"{spec.name}: {note}"))
        return
    progress.update(task, description=f"{spec.name}: planning")
    entry["state"] = "running"   # "planned" only once every case is (an interrupt here leaves "interrupted")
    plan_cases(spec, cases, on_observation=arrived, log_dir=run_dir / "logs" / spec.name)
    entry["state"] = "planned"
    progress.update(task, description=f"{spec.name}: done in {time.monotonic() - t0:.0f} s")


def _pack_of(spec: EngineFile, packs: Sequence[Path]) -> Path | None:
    from conformance.engines.pack_provenance import pack_provenance

    for pack in packs:
        if pack_provenance(pack).get("engine") == spec.name:
            return pack
    return None


def _serve_engine(entry: dict[str, Any], spec: EngineFile, cases: Sequence[Case], options: RunOptions, run_dir: Path,
                  log: rundir.ObservationLog, progress: Progress, task) -> None:
    """Live: serve every case on the engine (`harness.live_measure`), one observation per case as it is measured."""
    from conformance.harness.live_measure import measure, serves

    if not spec.live:
        entry["state"], entry["note"] = "skipped", "its engine file has no `live:` section"
        progress.update(task, description=f"{spec.name}: skipped (no live section)", completed=len(cases))
        return
    served = [c for c in cases if serves(spec, c)]
    if not served:
        entry["state"], entry["note"] = "skipped", "an oracle serves only cases on a GPU; every selected case is a CPU's"
        progress.update(task, description=f"{spec.name}: skipped (CPU cases only)", completed=len(cases))
        return
    entry["state"] = "running"
    pack = _pack_of(spec, options.packs)
    progress.update(task, total=len(served))
    for case in served:
        progress.update(task, description=f"{spec.name}: serving {case.id}")

        def rung(r: dict[str, Any], name: str = spec.name) -> None:
            tps = r.get("output_tok_per_s")
            progress.console.print(f"  {shown(name):<10} {shown(case.id):<32} c={r['concurrency']:<4} {r['status']:<6}"
                                   + (f" {tps:.1f} tok/s" if tps else ""))

        obs = measure(spec, case, dict(options.overrides), run_dir / "logs" / spec.name, on_rung=rung, pack_dir=pack)
        log.append(obs)
        progress.advance(task)
        if obs["status"] != "ok":
            first = (obs.get("message") or "").strip().splitlines()
            progress.console.print(f"  {shown(spec.name):<10} {shown(case.id):<32} {obs['status']}: "
                                   f"[dim]{shown(first[0][:160]) if first else ''}[/]")
    entry["state"] = "planned"
    progress.update(task, description=f"{spec.name}: served")


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
    """Judge the run directory (its verdicts stored in it: `session.judge_run_dir`), render `index.html`
    and `junit.xml` from it, print the summary. Where
    rendering raises on what an engine reported, the report of last resort (`report.fallback`) is
    written in its place and the summary says so: the run directory always ends with both files.
    A failed write (`OSError`: a full disk) is raised: nothing else can be written either."""
    session.judge_run_dir(run_dir)
    report = rundir.load_report(run_dir)
    index = _write_report(report, run_dir / rundir.INDEX_FILE, write_html, fallback_html, console)
    junit = _write_report(report, run_dir / rundir.JUNIT_FILE, write_junit, fallback_junit, console)
    if console is not None:
        print_summary(console, report, index, junit)
    return report


def _write_report(report: RunReport, path: Path, write, fallback, console: Console | None) -> Path:
    try:
        return write(report, path)
    except OSError:
        raise
    except Exception as exc:  # noqa: BLE001 -- rendering must not lose the run: the fallback holds the verdicts
        if console is not None:
            console.print(f"[red]{shown(path.name)}: the full report could not be rendered "
                          f"({shown(type(exc).__name__)}: {shown(str(exc)[:300])}); wrote the plain one[/]")
        return write_atomic(path, fallback(report, exc))
