"""`conformance merge`: shards of many hosts as one report, from local directories and over HTTP."""

from __future__ import annotations

import http.server
import io
import json
import tarfile
import threading
import zipfile
from pathlib import Path

import pytest

from conformance.cli.main import main
from conformance.run.provenance import source_digest
from conformance.run.rundir import load_report, read_run_meta

from tests.nightly.conftest import conformance_run


def _verdicts(run_dir: Path) -> set[tuple]:
    return {(v.check, v.engine, v.case_id, v.outcome, v.message) for v in load_report(run_dir).verdicts}


def test_merged_shards_judge_as_one_unsharded_run(sharded_runs, tmp_path, capsys):
    out = tmp_path / "merged"
    rc = main(["merge", str(sharded_runs["1/2"]), str(sharded_runs["2/2"]), "--out", str(out)])
    printed = capsys.readouterr().out
    whole = _verdicts(sharded_runs["all"])
    assert rc == 1   # the seed-bug port's failures fail the merged run as they fail the whole one
    assert _verdicts(out) == whole and len(whole) > 100
    assert any(v[3] == "fail" for v in whole) and any(v[3] == "pass" for v in whole)
    # each shard judged alone gives its half of the verdicts: together, the whole run's
    assert _verdicts(sharded_runs["1/2"]) | _verdicts(sharded_runs["2/2"]) == whole
    meta = read_run_meta(out)
    assert [(r["shard"], r["run_id"]) for r in meta["merged_from"]] == [
        ({"index": 1, "count": 2}, sharded_runs["1/2"].name), ({"index": 2, "count": 2}, sharded_runs["2/2"].name)]
    for r in meta["merged_from"]:
        assert f"merged {r['run_id']}" in printed and f"host {r['host']}" in printed
        assert f"shard {r['shard']['index']}/2" in printed
        assert r["source_digest"] == source_digest() and f"code {r['source_digest'][:19]}" in printed
    html = (out / "index.html").read_text()
    assert html.count(f"<code>{source_digest()[:19]}</code>") == 2      # the code column of each merged run
    assert html.count('class="cell ') == len(load_report(sharded_runs["all"]).cases) * 2
    assert html.count("<tr data-run=") == 2 and 'class="device"' in html


def test_a_missing_shard_is_said(sharded_runs, tmp_path, capsys):
    assert main(["merge", str(sharded_runs["1/2"]), "--out", str(tmp_path / "m")]) == 1
    assert "shards not merged: 2/2" in capsys.readouterr().out
    assert 'data-outcome="not run"' in (tmp_path / "m" / "index.html").read_text()


def test_runs_of_different_goldens_are_refused(sharded_runs, tmp_path, capsys):
    """A shard judged with a team's own goldens (--goldens-dir) is not put beside one judged without."""
    goldens = tmp_path / "team-goldens"
    goldens.mkdir()
    (goldens / "NOTE").write_text("the port's own goldens\n")
    other = conformance_run(tmp_path / "other", "--shard", "2/2", "--goldens-dir", str(goldens))
    rc = main(["merge", str(sharded_runs["1/2"]), str(other), "--out", str(tmp_path / "refused")])
    err = capsys.readouterr().err
    assert rc == 2 and "different goldens revisions" in err and str(other) in err and "Traceback" not in err
    assert not (tmp_path / "refused").exists()
    assert main(["merge", str(sharded_runs["1/2"]), str(other), "--out", str(tmp_path / "mixed"),
                 "--allow-mixed-goldens"]) == 1
    assert len(read_run_meta(tmp_path / "mixed")["goldens_revisions"]) == 2


class _Server:
    def __init__(self, root: Path):
        handler = lambda *a, **kw: http.server.SimpleHTTPRequestHandler(*a, directory=str(root), **kw)  # noqa: E731
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{name}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def artifacts(sharded_runs, tmp_path) -> Path:
    """Shard 1 as a .tar.gz (the run directory in one folder), shard 2 as a .zip (at its root)."""
    root = tmp_path / "artifacts"
    root.mkdir()
    with tarfile.open(root / "shard-1.tar.gz", "w:gz") as tf:
        tf.add(sharded_runs["1/2"], arcname=sharded_runs["1/2"].name)
    with zipfile.ZipFile(root / "shard-2.zip", "w") as zf:
        for f in sharded_runs["2/2"].rglob("*"):
            zf.write(f, f.relative_to(sharded_runs["2/2"]).as_posix())
    return root


def test_merge_fetches_ci_artifacts_over_http(sharded_runs, artifacts, tmp_path, capsys):
    out = tmp_path / "merged"
    with _Server(artifacts) as server:
        urls = [server.url("shard-1.tar.gz"), server.url("shard-2.zip")]
        assert main(["merge", *urls, "--out", str(out)]) == 1
        printed = capsys.readouterr().out
        assert _verdicts(out) == _verdicts(sharded_runs["all"])
        assert [r["source"] for r in read_run_meta(out)["merged_from"]] == urls
        assert all(u in printed for u in urls)
        assert main(["merge", server.url("no-such.tar.gz"), "--out", str(tmp_path / "x")]) == 2
        assert "no-such.tar.gz: HTTP 404" in capsys.readouterr().err


def test_an_archive_escaping_its_folder_is_refused(artifacts, tmp_path, capsys):
    evil = artifacts / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tf:
        data = b"{}\n"
        info = tarfile.TarInfo("../../escaped.jsonl")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    with _Server(artifacts) as server:
        assert main(["merge", server.url("evil.tar.gz"), "--out", str(tmp_path / "x")]) == 2
    assert "lies outside the archive's folder" in capsys.readouterr().err


def test_a_directory_that_is_no_run_is_refused(tmp_path, capsys):
    assert main(["merge", str(tmp_path), "--out", str(tmp_path / "x")]) == 2
    assert f"{tmp_path}: not a run directory" in capsys.readouterr().err
