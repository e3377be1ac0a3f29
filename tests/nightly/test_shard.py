"""`--shard i/n` in both faces: one rule, every cell in exactly one shard, bad values exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conformance import paths
from conformance.checks.check_table import CHECKS
from conformance.cli.main import main
from conformance.documents.cases import load_all
from conformance.errors import ConformanceError
from conformance.run.rundir import read_observations, read_run_meta
from conformance.run.shard import Shard, parse_shard, shard_index

from tests.nightly.conftest import ENGINES


def test_parse_shard():
    assert parse_shard("3/4") == Shard(3, 4) and parse_shard(None) is None
    for bad, says in (("0/2", "between 1 and 2"), ("3/2", "between 1 and 2"), ("1/0", "at least 1"),
                      ("a/b", "expected i/n"), ("1", "expected i/n"), ("-1/2", "expected i/n")):
        with pytest.raises(ConformanceError, match=says):
            parse_shard(bad)


def test_every_cell_lies_in_exactly_one_shard_and_partners_share_one():
    cells = [(e, c.id, c.spec["device"]) for e in ("reference", "vllm", "sglang", "my-port") for c in load_all()]
    for n in (1, 2, 3, 5, 8):
        held = [[Shard(i, n).holds(*cell) for i in range(1, n + 1)] for cell in cells]
        assert all(sum(h) == 1 for h in held)
        for check in (c for c in CHECKS if c.partner):
            for e in ("reference", "vllm"):
                assert shard_index(e, check.case_globs[0], "h200", n) == shard_index(e, check.partner, "h200", n)
    # both halves of 2 hold cells (a hash that put everything in one shard would not split the work)
    assert {shard_index(*cell, 2) for cell in cells} == {1, 2}


def test_the_rule_is_a_stable_hash_of_the_cell():
    # pinned: a change of the rule would split one nightly's hosts differently across versions
    assert [shard_index("reference", c, "h200", 4) for c in ("seed-draft-kv-c8", "seed-unified-pool-c32-k8")] == \
        [shard_index("reference", "seed-draft-kv-c32", "h200", 4), shard_index("reference", "seed-unified-pool-c32-k8", "h200", 4)]
    import hashlib

    d = hashlib.sha256(b"vllm\0drafting-table-dflash\0h200").hexdigest()
    assert shard_index("vllm", "drafting-table-dflash", "h200", 7) == int(d[:16], 16) % 7 + 1


def test_a_bad_shard_is_exit_2_in_both_faces(tmp_path, capsys):
    assert main(["run", "--shard", "3/2", "--out", str(tmp_path)]) == 2
    assert "--shard '3/2': the shard index must be between 1 and 2" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())   # nothing was planned
    run = subprocess.run([sys.executable, "-m", "pytest", "suites/budget", "--shard", "two/3", "-p", "no:cacheprovider"],
                         capture_output=True, text=True, cwd=str(paths.REPO_ROOT), timeout=300)
    assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-2000:]
    assert "--shard 'two/3': expected i/n" in run.stdout + run.stderr


def test_a_sharded_run_plans_its_cells_and_records_where_it_ran(sharded_runs):
    cases = {c["id"]: c["spec"]["device"] for c in read_run_meta(sharded_runs["all"])["cases"]}
    every = {(o["engine"]["name"], o["case_id"]) for o in read_observations(sharded_runs["all"])}
    assert len(every) == 2 * len(cases)
    halves = []
    for i in (1, 2):
        run_dir = sharded_runs[f"{i}/2"]
        got = {(o["engine"]["name"], o["case_id"]) for o in read_observations(run_dir)}
        assert got == {(e, c) for e, c in every if Shard(i, 2).holds(e, c, cases[c])}
        halves.append(got)
        prov = read_run_meta(run_dir)["provenance"]
        assert prov["shard"] == {"index": i, "count": 2}
        assert prov["host"] and prov["device"] and prov["goldens_revision"].startswith("sha256:")
        assert prov["framework_commit"] is None or len(prov["framework_commit"]) == 40
        assert {e["name"]: e["version"] for e in read_run_meta(run_dir)["engines"]}["reference"]
    assert halves[0] | halves[1] == every and not halves[0] & halves[1] and halves[0] and halves[1]
    assert read_run_meta(sharded_runs["all"])["provenance"]["shard"] is None


def test_pytest_and_conformance_run_shard_identically(sharded_runs, tmp_path):
    """The suites' shard 1/2 tests exactly the (engine, case) cells `conformance run --shard 1/2` planned."""
    out = tmp_path / "verdicts.jsonl"
    run = subprocess.run([sys.executable, "-m", "pytest", "suites/budget", "suites/memory", "suites/trace",
                          "--engines", ENGINES, "--cases", "tag:seed,drafting-table-*", "--shard", "1/2",
                          "-p", "no:cacheprovider", "-p", "no:randomly", "-q", "--verdicts-out", str(out)],
                         capture_output=True, text=True, cwd=str(paths.REPO_ROOT), timeout=900)
    assert run.returncode == 1, run.stdout[-3000:]   # the seed-bug port fails its checks
    suite_cells = {(v["engine"], v["case_id"]) for v in map(json.loads, out.read_text().splitlines())}
    job_cells = {(o["engine"]["name"], o["case_id"]) for o in read_observations(sharded_runs["1/2"])}
    assert suite_cells == job_cells and job_cells
