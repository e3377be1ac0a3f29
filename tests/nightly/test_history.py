"""The results store and `conformance history`: change points across commits, against SQLite and a real
PostgreSQL server (pgserver's binaries, started by the test)."""

from __future__ import annotations

import json
import random
import secrets
import sqlite3
from pathlib import Path

import pytest

from conformance import paths
from conformance.cli.main import main
from conformance.documents.cases import load_case
from conformance.errors import ConformanceError
from conformance.nightly.changes import change_points
from conformance.nightly.history import selected_series
from conformance.nightly.history_store import MIGRATIONS, SCHEMA_VERSION, open_store
from conformance.run.rundir import OBSERVATIONS_FILE, RUN_FILE, write_json_atomic
from conformance.run.session import judge_run_dir

H200_RUN = paths.REPO_ROOT / "suites" / "results" / "live" / "h200" / "reference-a1" / OBSERVATIONS_FILE
CASE = load_case(paths.live_cases_dir() / "live-2b-dflash-k8.yaml")
COMMITS = [f"{i:040x}" for i in range(0xA1, 0xA7)]   # six commits of the engine's nightly
CHANGED_AT = 3                                         # at the fourth commit its tok/s falls to 0.3 x


def _runs(root: Path, slowed: bool, seed: int) -> list[Path]:
    """One run directory per commit, from a measured H200 observation: every per-wave figure moved by
    ~2% noise (a fresh draw per run); with `slowed`, output tok/s x 0.3 from commit CHANGED_AT on (outside
    the case's regression band, 0.6 x). Each is judged, as `conformance run` judges its run directory."""
    rng = random.Random(seed)
    measured = json.loads(H200_RUN.read_text().splitlines()[0])
    dirs = []
    for k, commit in enumerate(COMMITS):
        obs = json.loads(json.dumps(measured))
        for rung in obs["throughput"]["rungs"]:
            for key in [k for k in rung if k.endswith("_repeats") and k != "repeats_t0_wall_time_ns"]:
                scale = 0.3 if slowed and key == "output_tok_per_s_repeats" and k >= CHANGED_AT else 1.0
                rung[key] = [x * scale * rng.lognormvariate(0, 0.02) if isinstance(x, (int, float)) else x
                             for x in rung[key]]
        run_dir = root / f"2026120{k + 1}-020000"
        run_dir.mkdir(parents=True)
        (run_dir / OBSERVATIONS_FILE).write_text(json.dumps(obs, sort_keys=True) + "\n")
        write_json_atomic(run_dir / RUN_FILE, {
            "run_id": run_dir.name, "started_at": f"2026-12-0{k + 1}T02:00:00", "finished_at": None,
            "selection": CASE.id, "interrupted": False,
            "engines": [{"name": "reference", "role": "under-test", "version": "0.1.0", "state": "planned", "note": ""}],
            "cases": [{"id": CASE.id, "spec": CASE.spec}],
            "provenance": {"host": "gpu-host-1", "device": "NVIDIA H200 x 1", "framework_commit": commit,
                           "goldens_revision": "sha256:test", "shard": None}})
        judge_run_dir(run_dir)
        dirs.append(run_dir)
    return dirs


def _check_history(url: str, tmp_path: Path) -> None:
    with open_store(url) as store:
        for run_dir in _runs(tmp_path / "slowed", slowed=True, seed=1):
            store.record_run(run_dir)
        store.record_run(run_dir)   # recorded twice: replaced, not counted twice
        assert store.num_runs() == len(COMMITS)
        items = selected_series(store, engine="reference")
    tok = [(s, c) for s, c in items if s.figure.endswith("output tok/s")]
    assert len(tok) == 6   # one per rung, c = 1 .. 32
    for series, changes in tok:
        assert [(c.commit, c.kind) for c in changes] == [(COMMITS[CHANGED_AT], "regression")], series.label()
        assert changes[0].interval.hi < 0.6 and changes[0].since == COMMITS[0]
    others = [(s, c) for s, c in items if not s.figure.endswith("output tok/s")]
    assert others and all(not c for _, c in others), [(s.label(), c) for s, c in others if c]


def _check_unchanged(url: str, tmp_path: Path) -> None:
    with open_store(url) as store:
        for run_dir in _runs(tmp_path / "unchanged", slowed=False, seed=2):
            store.record_run(run_dir)
        items = selected_series(store)
    assert len(items) > 20 and all(len(s.points) == len(COMMITS) for s, _ in items)
    assert [(s.label(), c) for s, c in items if c] == []


def test_change_point_at_the_commit_that_slowed_the_engine_sqlite(tmp_path):
    _check_history(f"sqlite:///{tmp_path / 'h.sqlite'}", tmp_path)


def test_repeated_unchanged_runs_have_no_change_point_sqlite(tmp_path):
    _check_unchanged(str(tmp_path / "h.sqlite"), tmp_path)


def test_history_command_prints_series_and_change_points(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    records = [a for d in _runs(tmp_path / "runs", slowed=True, seed=3) for a in ("--record", str(d))]
    html = tmp_path / "trend.html"
    assert main(["history", "--history", url, *records, "--figure", "c=8 *", "--html", str(html)]) == 0
    out = capsys.readouterr().out
    assert "reference · live-2b-dflash-k8 · h200 · c=8 output tok/s" in out
    assert f"4 series, 1 change point(s): reference · live-2b-dflash-k8 · h200 · c=8 output tok/s at " \
           f"{COMMITS[CHANGED_AT][:12]} (regression)" in out
    page = html.read_text()
    assert page.count("<svg") == 4 and page.count('class="change regression"') == 1
    assert main(["history", "--history", url, "--engine", "no-such-engine"]) == 0
    assert "0 series, 0 change point(s)" in capsys.readouterr().out


def test_conformance_run_appends_to_the_default_store(sharded_runs):
    for name in ("1/2", "all"):
        run_dir = sharded_runs[name]
        with open_store(str(run_dir.parent / "history.sqlite")) as store:
            assert store.num_runs() == 1 and store.samples()
        assert "<svg" in (run_dir / "history.html").read_text()


def test_migrations_apply_in_order_and_a_newer_store_is_refused(tmp_path):
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)   # a store written by a framework that knew only the first migration
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL, applied_at TEXT NOT NULL)")
    for sql in MIGRATIONS[0][1]:
        conn.execute(sql)
    conn.execute("INSERT INTO schema_version VALUES (1, 'then')")
    conn.commit()
    conn.close()
    with open_store(str(path)) as store:
        assert store.version() == SCHEMA_VERSION == 2
        assert [r[0] for r in store.execute("SELECT version FROM schema_version ORDER BY version")] == [1, 2]
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO schema_version VALUES (99, 'later')")
    conn.commit()
    conn.close()
    with pytest.raises(ConformanceError, match="schema version 99, newer than this framework's 2"):
        open_store(str(path))
    with pytest.raises(ConformanceError, match="expected sqlite:///PATH"):
        open_store("mysql://db/x")


@pytest.fixture(scope="module")
def postgres(tmp_path_factory):
    """A real PostgreSQL server (the binaries pgserver ships), stopped at the end."""
    try:
        import pgserver
        import psycopg
    except ImportError as exc:
        pytest.skip(f"PostgreSQL server binaries not installed ({exc.name}): pip install '.[test]'")
    data = Path("/tmp") / f"conformance-pg-{secrets.token_hex(4)}"   # short: a unix socket path is <= 107 bytes
    try:
        server = pgserver.get_server(data, cleanup_mode="delete")
    except Exception as exc:  # noqa: BLE001 -- the reason the binary could not start is the skip's
        pytest.skip(f"the PostgreSQL server binary could not start: {type(exc).__name__}: {exc}")
    yield server, psycopg
    server.cleanup()


def _database(postgres) -> str:
    server, psycopg = postgres
    name = f"history_{secrets.token_hex(4)}"
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server.get_uri(name)


def test_change_point_at_the_commit_that_slowed_the_engine_postgresql(postgres, tmp_path):
    url = _database(postgres)
    assert url.startswith("postgresql://")
    _check_history(url, tmp_path)
    with open_store(url) as store:   # one schema: the same migrations, recorded the same way
        assert store.version() == SCHEMA_VERSION


def test_repeated_unchanged_runs_have_no_change_point_postgresql(postgres, tmp_path):
    _check_unchanged(_database(postgres), tmp_path)
