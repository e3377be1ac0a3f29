"""A run directory judged again in another checkout than the one that measured it (a CI host's shard merged
here, a package verified elsewhere): its paths are read as this checkout's (conformance.run.relocate),
so its verdicts are the ones it had where it ran."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conformance import paths
from conformance.run.relocate import moves, relocated
from conformance.run.session import judge_observations

ELSEWHERE = "/ci/host-b/checkout"


def _verdicts(run_dir: Path) -> set[tuple[str, str, str, str]]:
    return {(v.check, v.engine, v.case_id, v.outcome) for v in judge_observations(run_dir)}


def _as_if_measured_elsewhere(run_dir: Path, dest: Path, record_root: bool) -> Path:
    """A copy of `run_dir` whose paths are those of a checkout at ELSEWHERE (run.json says so, or not)."""
    shutil.copytree(run_dir, dest)
    here = str(paths.REPO_ROOT)
    obs = dest / "observations.jsonl"
    obs.write_text(obs.read_text().replace(here, ELSEWHERE))
    meta = json.loads((dest / "run.json").read_text().replace(here, ELSEWHERE))
    if not record_root:
        meta["provenance"].pop("repo_root")
    (dest / "run.json").write_text(json.dumps(meta))
    return dest


def test_a_run_of_another_checkout_keeps_its_verdicts_here(sharded_runs, tmp_path):
    run = sharded_runs["all"]
    assert json.loads((run / "run.json").read_text())["provenance"]["repo_root"] == str(paths.REPO_ROOT)
    moved = _as_if_measured_elsewhere(run, tmp_path / "elsewhere", record_root=True)
    assert ELSEWHERE in (moved / "observations.jsonl").read_text()
    assert _verdicts(moved) == _verdicts(run)


def test_without_its_checkout_recorded_a_moved_run_differs_from_the_goldens(sharded_runs, tmp_path):
    """What the relocation prevents: the model directories a plan records differ from every golden."""
    run = sharded_runs["all"]
    moved = _as_if_measured_elsewhere(run, tmp_path / "unrecorded", record_root=False)
    lost = _verdicts(run) - _verdicts(moved)
    assert any(check.endswith(".golden") and outcome == "pass" for check, _, _, outcome in lost), sorted(lost)[:5]


def test_moves_are_longest_first_and_skip_what_is_already_here():
    here = str(paths.REPO_ROOT)
    meta = {"provenance": {"repo_root": "/a", "cache_dir": "/a/cache-of-a"}}
    pairs = moves(meta)
    assert pairs[0][0] == "/a/cache-of-a" and pairs[1] == ("/a", here)
    assert moves({"provenance": {"repo_root": here, "cache_dir": str(paths.cache_dir())}}) == []
    assert moves({}) == [] and moves(None) == []
    assert relocated({"x": ["/a/m", 3]}, [("/a", "/b")]) == {"x": ["/b/m", 3]}
    assert relocated(["/a", "at /a: x", "/ab/m", "/a-b", "/a.d"], [("/a", "/b")]) == ["/b", "at /b: x", "/ab/m", "/a-b", "/a.d"]
