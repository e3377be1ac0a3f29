"""Issue item 10: `point_latest` from two processes at once (it raced on a shared `.latest.tmp`);
`index.html` mode (was 0600, the rest 0644); a U+202E or NUL in an engine's message reaching the
HTML; `conformance plan` without `--log-dir` growing the cache's `logs/` forever."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
import time
from pathlib import Path

from conformance.documents import observation
from conformance.run import rundir

from ._cli import cli

NUM_CALLS = 1500


def _hammer(root: str, name: str, n: int, errors) -> None:
    for _ in range(n):
        try:
            rundir.point_latest(Path(root), Path(root) / name)
        except Exception as exc:   # noqa: BLE001 - counted and reported by the test
            errors.put(f"{name}: {type(exc).__name__}: {exc}")


def test_point_latest_from_two_processes_never_fails(tmp_path):
    for name in ("run-a", "run-b"):
        (tmp_path / name).mkdir()
    ctx = multiprocessing.get_context("fork")
    errors = ctx.Queue()
    procs = [ctx.Process(target=_hammer, args=(str(tmp_path), n, NUM_CALLS, errors)) for n in ("run-a", "run-b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert not found, f"{len(found)} failed calls, first: {found[:3]}"
    assert os.readlink(tmp_path / "latest") in ("run-a", "run-b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "run-a", "run-b"]   # no temp left


def _run_dir_with_message(tmp_path: Path, message: str) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    obs = observation.failed("tiny-dflash-c4-k8", "reference", "0.1.0", "plan", "h200", "error", message)
    (run_dir / "observations.jsonl").write_text(json.dumps(obs) + "\n")
    return run_dir


def test_report_neutralises_bidi_controls_and_nul_and_is_0644(tmp_path):
    run_dir = _run_dir_with_message(tmp_path, "evil \u202etxt.exe\u2066 and a \x00 byte")
    old = os.umask(0o022)
    try:
        ran = cli(["report", str(run_dir)], tmp_path)
    finally:
        os.umask(old)
    assert ran.rc in (0, 1), ran.err[-2000:]
    index = run_dir / "index.html"
    html = index.read_text(encoding="utf-8")
    for bad in ("\u202e", "\u2066", "\x00"):
        assert bad not in html, f"{bad!r} reached the HTML"
    assert "[U+202E]txt.exe[U+2066]" in html and "[U+0000]" in html
    assert stat.S_IMODE(index.stat().st_mode) == 0o644, oct(index.stat().st_mode)
    assert stat.S_IMODE((run_dir / "junit.xml").stat().st_mode) == 0o644
    assert not [p for p in run_dir.iterdir() if p.name.startswith(".")]


def test_plan_without_log_dir_prunes_the_cache_logs(tmp_path):
    logs = tmp_path / "cache" / "logs"
    logs.mkdir(parents=True)
    old = time.time() - 30 * 24 * 3600
    for i in range(80):
        d = logs / f"reference-old{i:03d}"
        d.mkdir()
        (d / "x.log").write_text("x")
        os.utime(d, (old + i, old + i))
    recent = time.time() - 60
    for i in range(60):
        d = logs / f"reference-new{i:03d}"
        d.mkdir()
        os.utime(d, (recent + i, recent + i))
    engine = tmp_path / "quick.yaml"
    engine.write_text("name: quick\nrole: under-test\nversion: '1'\nplan:\n  command:\n    argv: [/bin/false]\n")
    ran = cli(["plan", "--engine", str(engine), "--case", "tiny-dflash-c4-k8"], tmp_path)
    assert ran.rc == 1, ran.err[-2000:]
    left = sorted(p.name for p in logs.iterdir())
    assert not [n for n in left if "-old" in n], "directories older than a week were kept"
    assert len(left) <= 50, len(left)
    assert "reference-new059" in left and any(n.startswith("quick-") for n in left)   # the newest stay
