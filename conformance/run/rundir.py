"""A run directory, `reports/<run-id>/`, and how a report is rebuilt from it.

Layout:
    run.json            the run's metadata: id, times, selection, engines (state, note, version), every
                        selected case's spec, the expectations and goldens directory it was judged
                        with (so a re-render judges the cases as they were run), and its `provenance`
                        (host, device, framework commit, goldens revision, shard: `run.provenance`);
                        a merged run (`conformance merge`) lists its runs' under `merged_from`
    observations.jsonl  one observation per line, appended and flushed as each one arrives
    verdicts.jsonl      the verdicts the run was judged to (`run.session.judge_run_dir`), one per line
    index.html          the parity report        junit.xml   the verdicts for CI
    logs/<engine>/      the adapter processes' logs
`reports/latest` points at the newest run by start (a symlink, or a file holding the run id where links
fail); a run that finishes after a newer one started leaves it alone (`point_latest`).

Contract: the run directory stores and loads; it never judges. `load_observations(dir)` reads
`observations.jsonl` (+ `run.json` when present) into the run's cases, engines and observations by
(case id, engine); a trailing partial line (a run killed mid-write) is ignored, a line that is JSON but
no valid observation is that engine's `error` observation saying why (where it names its engine and
case), any other bad line raises `ObservationError` naming file and line. `write_verdicts(dir, verdicts)`
stores what the run was judged to; `load_report(dir)` rebuilds the `RunReport` from what is stored, the
verdicts as they were judged, and raises `NotJudgedError` for a directory that holds none (a run killed
before its report: `conformance report DIR` judges it).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import threading
import time
from pathlib import Path
from typing import Any, Iterable, NamedTuple

from conformance.checks.expectations import Expectation
from conformance.checks.verdicts import Verdict
from conformance.documents.observation import ObservationError, failed, validate
from conformance.documents.schemas.values import value_problems
from conformance.errors import ConformanceError
from conformance.report.atomic import write_atomic
from conformance.report.model import CaseEntry, EngineEntry, RunReport

RUN_FILE = "run.json"
OBSERVATIONS_FILE = "observations.jsonl"
VERDICTS_FILE = "verdicts.jsonl"
INDEX_FILE = "index.html"
JUNIT_FILE = "junit.xml"
LATEST = "latest"
TITLE = "DFlash parity report"


def new_run_dir(reports_root: Path, now: float | None = None) -> Path:
    """Create `reports_root/<YYYYmmdd-HHMMSS>[-n]/` (never reusing an existing directory)."""
    reports_root.mkdir(parents=True, exist_ok=True)
    stem = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    for n in range(1, 1000):
        path = reports_root / (stem if n == 1 else f"{stem}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise ConformanceError(f"{reports_root}: cannot create a run directory for {stem}")


def write_json_atomic(path: Path, doc: Any) -> None:
    """Write through a temp file of this process's own (removed on failure), then rename over `path`."""
    tmp = path.with_name(f".{path.name}-{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise


class ObservationLog:
    """Appends observations to `observations.jsonl`, one line each written straight to the file (no
    buffer: what `append` returned from is on disk; thread-safe). A write that fails (a full disk)
    raises `OSError` and leaves at most one unterminated last line, which `read_observations` ignores."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / OBSERVATIONS_FILE
        self._lock = threading.Lock()
        self._fh = self.path.open("ab", buffering=0)

    def append(self, obs: dict[str, Any]) -> None:
        data = memoryview((json.dumps(obs, sort_keys=True) + "\n").encode("ascii"))
        with self._lock:
            while data:
                data = data[self._fh.write(data):]

    def close(self) -> None:
        with self._lock:
            self._fh.close()


def read_observations(run_dir: Path) -> list[dict[str, Any]]:
    """The run's observations, validated, with the paths of the checkout that measured them written as
    this checkout's (`run.relocate`; run.json's provenance says where it ran). `run_dir` may also name
    the run's observations file itself."""
    from conformance.run.relocate import moves

    run_dir = Path(run_dir)
    if run_dir.name == OBSERVATIONS_FILE and not run_dir.is_dir():
        run_dir = run_dir.parent
    path = run_dir / OBSERVATIONS_FILE
    if not path.is_file():
        raise ConformanceError(f"{path}: no observations file (is {run_dir} a run directory of `conformance run`?)")
    lines = path.read_text(encoding="utf-8").split("\n")
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obs = json.loads(line)
        except (ValueError, RecursionError) as exc:   # JSONDecodeError, an int past Python's digit limit, nesting
            if i == len(lines) and isinstance(exc, json.JSONDecodeError):   # unterminated: killed while writing it
                break
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
            raise ObservationError([f"{path}: line {i}: not JSON ({why})"]) from None
        out.append(_accepted(obs, f"{path}: line {i}"))
    pairs = moves(_meta_or_none(Path(run_dir)))
    if pairs:
        from conformance.run.relocate import relocated

        out = [relocated(o, pairs) for o in out]
    return out


def _meta_or_none(run_dir: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None   # load_report says what is wrong with run.json; the observations are read as they are
    return meta if isinstance(meta, dict) else None


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value and not value_problems(value) else None


def _accepted(obs: Any, where: str) -> dict[str, Any]:
    """A line's observation, validated. One that is no longer valid (the framework's rules grew
    since it was written: a lone surrogate, an integer past 2^63) but still says whose and which
    case it is becomes that engine's `error` observation naming what is wrong, so the run still
    re-renders; a line that says neither raises `ObservationError` naming file and line."""
    try:
        return validate(obs, where)
    except ObservationError as exc:
        doc = obs if isinstance(obs, dict) else {}
        engine = doc.get("engine") if isinstance(doc.get("engine"), dict) else {}
        device = doc.get("device") if isinstance(doc.get("device"), dict) else {}
        case_id, name = _text_or_none(doc.get("case_id")), _text_or_none(engine.get("name"))
        if case_id is None or name is None:
            raise
        return failed(case_id, name, _text_or_none(engine.get("version")) or "unknown",
                      doc.get("mode") if doc.get("mode") in ("plan", "run") else "plan",
                      _text_or_none(device.get("profile")) or "unknown", "error",
                      f"the observation recorded here is not valid:\n{exc}")


def read_run_meta(run_dir: Path) -> dict[str, Any] | None:
    path = Path(run_dir) / RUN_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConformanceError(f"{path}: not valid JSON: {exc.msg} (line {exc.lineno})") from None


def _case_entries(meta: dict[str, Any] | None, observations: Iterable[dict[str, Any]]) -> list[CaseEntry]:
    if meta and meta.get("cases"):
        return [CaseEntry(c["id"], c["spec"]) for c in meta["cases"]]
    from conformance.documents.cases import find_case

    entries: dict[str, CaseEntry] = {}
    for obs in observations:
        cid = obs["case_id"]
        if cid not in entries:
            try:
                entries[cid] = CaseEntry(cid, find_case(cid).spec)
            except ConformanceError:
                entries[cid] = CaseEntry(cid, {"id": cid, "memory": {}})
    return list(entries.values())


def _engine_entries(meta: dict[str, Any] | None, observations: list[dict[str, Any]]) -> list[EngineEntry]:
    versions: dict[str, str] = {}
    for obs in observations:
        versions.setdefault(obs["engine"]["name"], obs["engine"]["version"])
    if meta and meta.get("engines"):
        return [EngineEntry(e["name"], versions.get(e["name"], e.get("version")), e.get("state", "planned"),
                            e.get("note", ""), e.get("role"), tuple(e.get("defects") or ())) for e in meta["engines"]]
    return [EngineEntry(name, version, "planned") for name, version in versions.items()]


class LoadedRun(NamedTuple):
    meta: dict[str, Any]                                      # run.json ({} where there is none)
    cases: list[CaseEntry]
    engines: list[EngineEntry]
    observations: dict[tuple[str, str], dict[str, Any]]       # by (case id, engine)


def load_observations(run_dir: Path) -> LoadedRun:
    run_dir = Path(run_dir)
    observations = read_observations(run_dir)
    meta = read_run_meta(run_dir)
    by_key: dict[tuple[str, str], dict[str, Any]] = {}
    for obs in observations:   # a case planned twice (a retried engine): the last observation wins
        by_key[(obs["case_id"], obs["engine"]["name"])] = obs
    return LoadedRun(meta or {}, _case_entries(meta, observations), _engine_entries(meta, observations), by_key)


class NotJudgedError(ConformanceError):
    """A run directory that holds no verdicts: the run stopped before it was judged."""


def write_verdicts(run_dir: Path, verdicts: Iterable[Verdict]) -> None:
    """Store the run's verdicts (replacing any, atomically: a full disk leaves the old file whole)."""
    text = "".join(json.dumps(v.to_json(), sort_keys=True) + "\n" for v in verdicts)
    write_atomic(Path(run_dir) / VERDICTS_FILE, text.encode("utf-8"))


def read_verdicts(run_dir: Path) -> list[Verdict]:
    path = Path(run_dir) / VERDICTS_FILE
    if not path.is_file():
        raise NotJudgedError(f"{run_dir}: no {VERDICTS_FILE}: the run was not judged (it stopped before its "
                             f"report); `conformance report {run_dir}` judges it")
    out = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            out.append(Verdict(d["check"], d["engine"], d["case_id"], d["outcome"], d.get("message", ""),
                               tuple(d.get("details") or ()), d.get("cause", "")))
        except (ValueError, TypeError, KeyError) as exc:
            raise ConformanceError(f"{path}: line {i}: not a verdict ({type(exc).__name__}: {exc}); "
                                   f"`conformance report {run_dir}` judges the run again") from None
    return out


def load_report(run_dir: Path) -> RunReport:
    run_dir = Path(run_dir)
    loaded = load_observations(run_dir)
    meta = loaded.meta
    return RunReport(
        run_id=meta.get("run_id", run_dir.name), title=TITLE, engines=tuple(loaded.engines),
        cases=tuple(loaded.cases), observations=loaded.observations, verdicts=tuple(read_verdicts(run_dir)),
        started_at=meta.get("started_at"), finished_at=meta.get("finished_at"),
        interrupted=bool(meta.get("interrupted")), selection=meta.get("selection", ""),
        expectations=tuple(Expectation.from_json(e) for e in meta.get("expectations") or ()),
        goldens_dir=meta.get("goldens_dir"), origin=meta.get("origin", "conformance run"),
        runs=tuple(runs_of(meta)),
    )


def runs_of(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs a run directory holds: a merged one's `merged_from`, else the run itself (its
    `provenance`: host, device, shard, framework commit, goldens revision), none for a run without it."""
    if meta.get("merged_from"):
        return list(meta["merged_from"])
    prov = meta.get("provenance")
    return [dict(prov, run_id=meta.get("run_id"))] if prov else []


_RUN_ID = re.compile(r"(\d{8}-\d{6})(?:-(\d+))?")


def start_order(run_id: str) -> tuple[str, int] | None:
    """A run id's place in start order (`new_run_dir` names runs by their start), None for a name
    not made by it."""
    m = _RUN_ID.fullmatch(run_id)
    return (m.group(1), int(m.group(2) or 1)) if m else None


def _latest_name(latest: Path) -> str | None:
    try:
        if latest.is_symlink():
            return os.readlink(latest)
        if latest.is_file():
            return latest.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        pass
    return None


def point_latest(reports_root: Path, run_dir: Path) -> Path:
    """Make `reports_root/latest` name `run_dir`, unless it names a run that started later (runs
    overlap: the one that finishes last is not the newest): a relative symlink, else a file with
    the run id.

    The link is built under a name of its own (`.latest-<pid>-<random>`) and renamed over `latest`
    (atomic), so runs finishing at the same time never trip over each other's temp file; the temp
    is removed if anything fails. Reading which run `latest` names and replacing it happen under an
    exclusive lock on `reports_root` itself (flock), so two runs finishing at once cannot leave the
    older one there."""
    latest = reports_root / LATEST
    if latest.is_dir() and not latest.is_symlink():
        raise ConformanceError(f"{latest} is a directory; remove it so the latest run can be linked there")
    lock = os.open(reports_root, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        current = _latest_name(latest)
        if current and current != run_dir.name and (reports_root / current).is_dir():
            theirs, mine = start_order(current), start_order(run_dir.name)
            if theirs and mine and theirs > mine:
                return latest
        _replace_latest(reports_root, latest, run_dir)
    finally:
        os.close(lock)
    return latest


def _replace_latest(reports_root: Path, latest: Path, run_dir: Path) -> None:
    tmp = reports_root / f".{LATEST}-{os.getpid()}-{secrets.token_hex(6)}"
    try:
        try:
            os.symlink(run_dir.name, tmp)
        except OSError:
            with open(tmp, "x", encoding="utf-8") as fh:
                fh.write(run_dir.name + "\n")
        os.replace(tmp, latest)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def resolve_run_dir(path: Path) -> Path:
    """A run directory, following `latest` (a symlink, or a file holding the run id)."""
    path = Path(path)
    if path.is_file() and path.name == LATEST:
        return path.parent / path.read_text().strip()
    return path.resolve()
