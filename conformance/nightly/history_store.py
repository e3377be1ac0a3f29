"""The results store: every run's figures and verdicts, in SQLite (a file) or PostgreSQL (a team's server).

Contract: `open_store(url)` opens (and migrates) a store:

    sqlite:////abs/path.sqlite (SQLAlchemy's form: sqlite:///rel.sqlite is relative), or a plain path
                                                                          a SQLite file (made when absent)
    postgresql://user@host:port/db (also postgres://)                     PostgreSQL, through psycopg 3

One schema for both, built by `MIGRATIONS`, applied in order, each in its own transaction, recorded in
`schema_version` (one row per applied migration); a store whose version is newer than this code's is
refused. `Store.record_run(run_dir, report)` appends one run (its provenance, every figure of every
observation (`nightly.figures`), every verdict); a run already recorded (same host and run id) is
replaced, so recording twice does not count twice. `Store.samples(...)` reads the series back.

    runs      run_key (host/run_id), run_id, host, device, framework_commit, goldens_revision, shard,
              started_at, recorded_at
    samples   run_key, engine, engine_version, case_id, device, figure, sample_index, value,
              limit_ratio, upper (1: less is better)
    verdicts  run_key, engine, case_id, check_name, outcome
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence
from urllib.parse import urlparse

from conformance.errors import ConformanceError

MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (1, ("CREATE TABLE runs (run_key TEXT PRIMARY KEY, run_id TEXT NOT NULL, host TEXT, device TEXT, "
         "framework_commit TEXT, goldens_revision TEXT, shard TEXT, started_at TEXT, recorded_at TEXT NOT NULL)",
         "CREATE TABLE samples (run_key TEXT NOT NULL REFERENCES runs (run_key) ON DELETE CASCADE, "
         "engine TEXT NOT NULL, engine_version TEXT, case_id TEXT NOT NULL, device TEXT NOT NULL, "
         "figure TEXT NOT NULL, sample_index INTEGER NOT NULL, value DOUBLE PRECISION NOT NULL, "
         "limit_ratio DOUBLE PRECISION NOT NULL, upper INTEGER NOT NULL, "
         "PRIMARY KEY (run_key, engine, case_id, device, figure, sample_index))")),
    (2, ("CREATE INDEX samples_series ON samples (engine, case_id, device, figure)",
         "CREATE TABLE verdicts (run_key TEXT NOT NULL REFERENCES runs (run_key) ON DELETE CASCADE, "
         "engine TEXT NOT NULL, case_id TEXT NOT NULL, check_name TEXT NOT NULL, outcome TEXT NOT NULL, "
         "PRIMARY KEY (run_key, engine, case_id, check_name))")),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]
DEFAULT_FILE = "history.sqlite"


@dataclass(frozen=True)
class Sample:
    engine: str
    case_id: str
    device: str
    figure: str
    commit: str
    run_key: str
    started_at: str
    value: float
    limit_ratio: float
    upper: bool


class Store:
    def __init__(self, conn, placeholder: str, url: str):
        self.conn, self._ph, self.url = conn, placeholder, url

    def _sql(self, sql: str) -> str:
        return sql.replace("?", self._ph)

    def execute(self, sql: str, params: Sequence[Any] = ()):
        cur = self.conn.cursor()
        cur.execute(self._sql(sql), tuple(params))
        return cur

    def close(self) -> None:
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- schema --------------------------------------------------------------------------------------

    def version(self) -> int:
        row = self.execute("SELECT MAX(version) FROM schema_version").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def migrate(self) -> int:
        self.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, applied_at TEXT NOT NULL)")
        self.conn.commit()
        current = self.version()
        if current > SCHEMA_VERSION:
            raise ConformanceError(f"{self.url}: the history store is at schema version {current}, newer than this "
                                   f"framework's {SCHEMA_VERSION}; upgrade the framework to use it")
        for version, statements in MIGRATIONS:
            if version <= current:
                continue
            try:
                for sql in statements:
                    self.execute(sql)
                self.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                             (version, time.strftime("%Y-%m-%dT%H:%M:%S")))
                self.conn.commit()
            except Exception:
                self.conn.rollback()
                raise
        return self.version()

    # --- writing -------------------------------------------------------------------------------------

    def record_run(self, run_dir: Path, report=None) -> str:
        """Append the run directory's run (see the module doc); its run key."""
        from conformance.run import rundir
        from conformance.nightly.figures import figures_of

        run_dir = Path(run_dir)
        meta = rundir.read_run_meta(run_dir) or {}
        report = report if report is not None else rundir.load_report(run_dir)
        prov = meta.get("provenance") or {}
        run_id = meta.get("run_id") or run_dir.name
        key = f"{prov.get('host') or 'unknown'}/{run_id}"
        shard = prov.get("shard")
        specs = {c.id: c.spec for c in report.cases}
        try:
            self.execute("DELETE FROM verdicts WHERE run_key = ?", (key,))
            self.execute("DELETE FROM samples WHERE run_key = ?", (key,))
            self.execute("DELETE FROM runs WHERE run_key = ?", (key,))
            self.execute("INSERT INTO runs (run_key, run_id, host, device, framework_commit, goldens_revision, shard, "
                         "started_at, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         (key, run_id, prov.get("host"), prov.get("device"), prov.get("framework_commit") or "unknown",
                          prov.get("goldens_revision"), f"{shard['index']}/{shard['count']}" if shard else None,
                          meta.get("started_at") or "", time.strftime("%Y-%m-%dT%H:%M:%S")))
            rows = []
            for (case_id, engine), obs in report.observations.items():
                device = (obs.get("device") or {}).get("profile") or "unknown"
                for fig in figures_of(obs, specs.get(case_id, {})):
                    rows += [(key, engine, obs["engine"].get("version"), case_id, device, fig.name, i, x,
                              fig.limit, int(fig.upper)) for i, x in enumerate(fig.samples)]
            self._many("INSERT INTO samples (run_key, engine, engine_version, case_id, device, figure, sample_index, "
                       "value, limit_ratio, upper) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
            verdicts = {(v.engine, v.case_id, v.check): v.outcome for v in report.verdicts}
            self._many("INSERT INTO verdicts (run_key, engine, case_id, check_name, outcome) VALUES (?, ?, ?, ?, ?)",
                       [(key, e, c, ch, o) for (e, c, ch), o in verdicts.items()])
            self.conn.commit()
        except Exception:
            self.conn.rollback()
            raise
        return key

    def _many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        rows = list(rows)
        if rows:
            self.conn.cursor().executemany(self._sql(sql), rows)

    # --- reading -------------------------------------------------------------------------------------

    def samples(self) -> list[Sample]:
        cur = self.execute(
            "SELECT s.engine, s.case_id, s.device, s.figure, r.framework_commit, r.run_key, r.started_at, s.value, "
            "s.limit_ratio, s.upper FROM samples s JOIN runs r ON r.run_key = s.run_key "
            "ORDER BY r.started_at, r.run_key, s.sample_index")
        return [Sample(*row[:9], bool(row[9])) for row in cur.fetchall()]

    def num_runs(self) -> int:
        return int(self.execute("SELECT COUNT(*) FROM runs").fetchone()[0])


def default_url(reports_root: Path) -> str:
    """The default store of a reports directory: a SQLite file beside its runs."""
    return f"sqlite:///{(Path(reports_root) / DEFAULT_FILE).resolve()}"


def open_store(url: str) -> Store:
    parsed = urlparse(url)
    if parsed.scheme in ("postgresql", "postgres"):
        try:
            import psycopg
        except ImportError:
            raise ConformanceError(f"--history {url}: PostgreSQL needs psycopg 3 (pip install 'psycopg[binary]')") from None
        try:
            conn = psycopg.connect(url)
        except psycopg.Error as exc:
            raise ConformanceError(f"--history {_redacted(url)}: cannot connect: {str(exc).strip()}") from None
        store = Store(conn, "%s", _redacted(url))
    elif parsed.scheme in ("sqlite", "") or len(parsed.scheme) == 1:   # a plain path (or a drive letter)
        path = Path(_sqlite_path(url) if parsed.scheme == "sqlite" else url)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(path, timeout=60)
        except (OSError, sqlite3.Error) as exc:
            raise ConformanceError(f"--history {url}: cannot open {path}: {exc}") from None
        conn.execute("PRAGMA foreign_keys = ON")
        store = Store(conn, "?", url)
    else:
        raise ConformanceError(f"--history {url}: expected sqlite:///PATH, a file path or postgresql://...")
    store.migrate()
    return store


def _sqlite_path(url: str) -> str:
    """As SQLAlchemy reads them: sqlite:////abs/path (four slashes) absolute, sqlite:///rel and sqlite:rel relative."""
    rest = url[len("sqlite:"):]
    return rest[3:] if rest.startswith("///") else rest.removeprefix("//")


def _redacted(url: str) -> str:
    p = urlparse(url)
    if p.password:
        return url.replace(f":{p.password}@", ":***@", 1)
    return url
