"""The pytest face of a team's CI gate (`pytest suites/ --expectations FILE --goldens-dir DIR`), run
as a team runs it, in a pytester directory of its own on the framework's suites: an expected failure
is xfailed, an expected failure that passes is XPASS(strict) and fails the session, a failure no
entry names fails it, and the summary lists the three apart; a bad file is a usage error naming the
file and the JSON path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conformance import paths

pytest_plugins = ["pytester"]

PORT_DIR = paths.REPO_ROOT / "examples" / "defective-port"
SEED_BUGS = PORT_DIR / "engine-seed-bugs.yaml"
EXPECTATIONS = PORT_DIR / "expectations-seed-bugs.yaml"
SUITES = [str(paths.REPO_ROOT / "suites" / s) for s in ("budget", "memory", "trace")]


def _suites(pytester: pytest.Pytester, engine: Path, *extra: str, cases: str = "seed-draft-kv-*"):
    return pytester.runpytest_subprocess(*SUITES, "--engines", str(engine), "--cases", cases, "-p", "no:randomly",
                                         "-p", "no:cacheprovider", "-q", "-rxX", *extra, timeout=600)


def _variant(tmp: Path, defects: list[str]) -> Path:
    doc = yaml.safe_load(SEED_BUGS.read_text())
    doc["defects"] = defects
    doc["plan"]["command"]["argv"] = [a.replace("{engine_dir}", str(PORT_DIR)) for a in doc["plan"]["command"]["argv"]]
    f = tmp / "fixed-port.yaml"
    f.write_text(yaml.safe_dump(doc))
    return f


def _section(out: str) -> str:
    return out.split("expectations =", 1)[1] if "expectations =" in out else ""


def test_expected_failures_xfail_and_the_session_passes(pytester):
    plain = _suites(pytester, SEED_BUGS)
    assert plain.ret == 1
    failed = plain.parseoutcomes()["failed"]
    gated = _suites(pytester, SEED_BUGS, "--expectations", str(EXPECTATIONS),
                    "--parity-report", str(pytester.path / "parity"))
    out = gated.stdout.str()
    assert gated.ret == 0, out[-3000:]
    outcomes = gated.parseoutcomes()
    assert outcomes["xfailed"] == failed and "failed" not in outcomes
    assert "XFAIL" in out and "test_memory_checks[inside_bound-port-seed-bugs-seed-draft-kv-c8]" in out
    section = _section(out)
    assert f"expected failures: {failed}" in section
    assert "unexpected passes (fail the run): 0" in section and "new failures (fail the run): 0" in section
    assert "draft KV (9.43 GiB) is allocated beside the pool" in section
    html = (pytester.path / "parity" / "index.html").read_text()   # the session's report reads them alike
    assert f'id="expected-failures">Expected failures: {failed}<' in html and 'New failures: 0<' in html


def test_a_fixed_bug_is_an_unexpected_pass_that_fails_the_session(pytester):
    fixed = _variant(pytester.path, ["two-pools", "no-drafting-reservation"])   # draft KV inside the bound now
    result = _suites(pytester, fixed, "--expectations", str(EXPECTATIONS))
    out = result.stdout.str()
    assert result.ret == 1, out[-3000:]
    assert "[XPASS(strict)] expected failure: draft KV (9.43 GiB)" in out
    section = _section(out)
    assert "unexpected passes (fail the run): 0" not in section
    assert "test_memory_checks[inside_bound-port-seed-bugs-seed-draft-kv-c8]: passed, but draft KV" in section
    assert "new failures (fail the run): 0" in section


def test_a_failure_no_entry_names_fails_the_session(pytester):
    doc = yaml.safe_load(EXPECTATIONS.read_text())
    doc["expectations"] = [e for e in doc["expectations"] if e["check"] != "memory.draft_kv_scaling"]
    partial = pytester.path / "partial.yaml"
    partial.write_text(yaml.safe_dump(doc))
    result = _suites(pytester, SEED_BUGS, "--expectations", str(partial))
    out = result.stdout.str()
    assert result.ret == 1
    assert result.parseoutcomes()["failed"] == 1
    section = _section(out)
    assert "new failures (fail the run): 1" in section
    assert "test_memory_checks[draft_kv_scaling-port-seed-bugs-seed-draft-kv-c8]" in section


def test_a_bad_expectations_file_is_a_usage_error_naming_file_and_path(pytester):
    bad = pytester.path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"engine": "port-seed-bugs",
                                   "expectations": [{"check": "memory.inside_bound", "reason": "r"},
                                                    {"check": "memory.nope", "reason": "r", "link": "PORT-2"}]}))
    result = _suites(pytester, SEED_BUGS, "--expectations", str(bad))
    err = result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"{bad}: expectations[0]: 'link' is a required property" in err
    assert "Traceback" not in err


def test_goldens_dir_keeps_an_engine_under_tests_goldens_in_the_teams_directory(pytester):
    """Recorded there by --snapshot-update, judged from there (a moved figure fails, naming the file)."""
    team = pytester.path / "team-goldens"
    args = ("--goldens-dir", str(team), "-k", "golden")
    recorded = _suites(pytester, SEED_BUGS, *args, "--snapshot-update", cases="seed-draft-kv-c8")
    assert recorded.ret == 0, recorded.stdout.str()[-3000:]
    files = sorted(p.relative_to(team).as_posix() for p in team.rglob("*.json"))
    assert files == [f"{s}/test_{s}/test_{s}_golden[port-seed-bugs-seed-draft-kv-c8].json"
                     for s in ("budget", "memory", "trace")]
    judged = _suites(pytester, SEED_BUGS, *args, cases="seed-draft-kv-c8")
    assert judged.ret == 0 and judged.parseoutcomes()["passed"] == 3
    golden = team / files[1]
    golden.write_text(golden.read_text().replace('"max_concurrency": 32.0', '"max_concurrency": 33.0'))
    moved = _suites(pytester, SEED_BUGS, *args, cases="seed-draft-kv-c8")
    assert moved.ret == 1 and moved.parseoutcomes()["failed"] == 1
    assert "max_concurrency" in moved.stdout.str()


def test_an_oracles_failed_check_is_xfailed_as_a_finding(pytester):
    """An engine of role oracle whose draft KV lies outside its bound: `memory.draft_kv_scaling` (which
    judges both roles) fails for it, and pytest reports a finding about the oracle, as `conformance run`
    does, not a failure of the session. The same engine under test fails it."""
    doc = yaml.safe_load(SEED_BUGS.read_text())
    doc.update(name="oracle-with-draft-kv-outside", role="oracle", defects=["draft-kv-outside-bound"])
    doc["plan"]["command"]["argv"] = [a.replace("{engine_dir}", str(PORT_DIR)) for a in doc["plan"]["command"]["argv"]]
    oracle = pytester.path / "oracle.yaml"
    oracle.write_text(yaml.safe_dump(doc))
    result = _suites(pytester, oracle, "-k", "draft_kv_scaling")
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    outcomes = result.parseoutcomes()
    assert outcomes["xfailed"] == 1 and "failed" not in outcomes and "passed" not in outcomes
    assert "finding about the oracle oracle-with-draft-kv-outside (not a failure): memory.draft_kv_scaling" in out
    under_test = pytester.path / "under-test.yaml"
    under_test.write_text(yaml.safe_dump(dict(doc, role="under-test")))
    result = _suites(pytester, under_test, "-k", "draft_kv_scaling")
    assert result.ret == 1 and result.parseoutcomes()["failed"] == 1 and "xfailed" not in result.parseoutcomes()
