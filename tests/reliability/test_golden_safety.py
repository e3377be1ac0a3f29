"""Golden safety: the plugin + syrupy extension, exercised on a small suite in a pytester dir.

The suite (`goldsuite/test_gold.py`) has a case dir of its own and runs in-process on a fake
engine (tests/fixtures/fake_engine.py, registered for the test's duration) through the real
runner and probe (a real subprocess). Goldens go
to the pytester dir (`DFLASH_CONFORMANCE_GOLDENS`), never to the repository's goldens/.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conformance.documents.cases import find_case

pytest_plugins = ["pytester"]

CASE_ID = "gold-case"

FAKE_ENGINE_FILE = """name: fake
role: oracle
version: "1.0.0"
plan: {module: {name: tests.fixtures.fake_engine, startup_timeout_s: 60, per_case_timeout_s: 60}}
"""

INNER_SUITE = '''
from conformance.pytest_plugin.suite import golden_test

test_budget_golden = golden_test("budget")
'''


class Suite:
    """The pytester dir: a case dir, a suite, a goldens dir and the fake engine's state file."""

    def __init__(self, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, recorded: dict[str, bytes]):
        self.pytester, self.recorded = pytester, recorded
        root = pytester.path
        self.cases = root / "cases"
        self.cases.mkdir()
        doc = yaml.safe_load(find_case("tiny-dflash-c4-k8").path.read_text())
        doc["id"] = CASE_ID
        (self.cases / f"{CASE_ID}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        self.case_doc = doc
        self.goldens = root / "goldens"
        self.state = root / "fake-engine.json"
        self.set_engine(version="1.0.0", max_num_seqs_offset=0)
        (root / "goldsuite").mkdir()
        (root / "goldsuite" / "test_gold.py").write_text(INNER_SUITE)
        monkeypatch.setenv("DFLASH_CONFORMANCE_GOLDENS", str(self.goldens))
        monkeypatch.setenv("FAKE_ENGINE_STATE", str(self.state))
        self.engine_file = root / "fake.yaml"
        self.engine_file.write_text(FAKE_ENGINE_FILE)

    def set_engine(self, **state) -> None:
        self.state.write_text(json.dumps(state))

    def run(self, *args: str) -> pytest.RunResult:
        return self.pytester.runpytest_inprocess(
            "goldsuite", "--engines", str(self.engine_file), "--cases-dir", str(self.cases), "-p", "no:cacheprovider", *args)

    def record(self) -> None:
        """The fake engine's golden at version 1.0.0, as `--snapshot-update` records it: recorded for
        real once per session, then copied (it is the same bytes for every test of this module)."""
        if not self.recorded:
            self.run("--snapshot-update").assert_outcomes(passed=1)
            self.recorded.update({str(p.relative_to(self.goldens)): p.read_bytes() for p in self.golden_files()})
            return
        for rel, data in self.recorded.items():
            (self.goldens / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.goldens / rel).write_bytes(data)

    def golden_files(self) -> list[Path]:
        return sorted(self.goldens.rglob("*.json")) if self.goldens.exists() else []

    def golden(self) -> Path:
        files = self.golden_files()
        assert len(files) == 1, files
        return files[0]

    def edit_golden(self, edit) -> None:
        path = self.golden()
        doc = json.loads(path.read_text())
        edit(doc)
        path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


@pytest.fixture(scope="module")
def recorded() -> dict[str, bytes]:
    return {}


@pytest.fixture
def suite(pytester, monkeypatch, recorded) -> Suite:
    return Suite(pytester, monkeypatch, recorded)


def test_no_golden_is_written_without_snapshot_update(suite):
    result = suite.run()
    result.assert_outcomes(failed=1)
    assert suite.golden_files() == [], "a normal run must never write a golden"
    result.stdout.fnmatch_lines(["*no golden of the oracle fake at *: record the oracle's goldens with `pytest "
                                 "suites/budget --engines fake --snapshot-update`*"])


def test_recorded_golden_carries_format_schema_and_provenance(suite):
    suite.run("--snapshot-update").assert_outcomes(passed=1)
    doc = json.loads(suite.golden().read_text())
    assert doc["golden_format"] == 1
    assert doc["schema_version"] == "1"
    assert doc["engine"] == {"name": "fake", "version": "1.0.0"}
    assert doc["device_profile"] == suite.case_doc["device"]
    assert doc["provenance"]["functions"] == ["tests.fixtures.fake_engine.plan"]
    assert doc["case_id"] == CASE_ID and doc["status"] == "ok"
    assert "timing" not in json.dumps(doc), "volatile fields are never recorded"
    before = suite.golden().read_bytes()
    suite.run().assert_outcomes(passed=1)
    assert suite.golden().read_bytes() == before, "a passing run leaves the golden untouched"


def test_update_prints_what_moved(suite):
    suite.run("--snapshot-update").assert_outcomes(passed=1)
    seqs = suite.case_doc["scheduler"]["max_num_seqs"]
    suite.set_engine(version="1.0.0", max_num_seqs_offset=2)
    result = suite.run("--snapshot-update")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*golden updates*",
        "*/goldsuite/test_gold/*.json: * field(s) moved:",
        f"*budget.max_num_seqs: {seqs} -> {seqs + 2}*",
    ])
    assert json.loads(suite.golden().read_text())["budget"]["max_num_seqs"] == seqs + 2
    unchanged = suite.run("--snapshot-update")
    assert "golden updates" not in unchanged.stdout.str(), "nothing moved, nothing to report"


def test_golden_of_another_oracle_version_fails_with_a_message(suite):
    suite.record()
    suite.set_engine(version="1.1.0", max_num_seqs_offset=2)
    result = suite.run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*golden recorded with fake 1.0.0, but the live engine is fake 1.1.0*"])
    out = result.stdout.str()
    assert "differs from its golden" not in out and "budget.max_num_seqs" not in out, "a message, not a raw diff"


def test_golden_on_another_device_profile_fails_with_a_message(suite):
    suite.record()
    suite.edit_golden(lambda d: d.update(device_profile="h100"))
    result = suite.run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*golden recorded on device profile 'h100', live is 'h200'*"])


def test_golden_without_golden_format_raises_a_clear_error(suite):
    suite.record()
    suite.edit_golden(lambda d: d.pop("golden_format"))
    result = suite.run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*/goldsuite/test_gold/*.json: golden has no golden_format field; "
                                 "re-record it with --snapshot-update*"])
    assert "Traceback" not in result.stdout.str() and "GoldenFormatError" not in result.stdout.str()
    suite.run("--snapshot-update").assert_outcomes(passed=1)  # the advice works
    assert json.loads(suite.golden().read_text())["golden_format"] == 1


def test_golden_of_another_format_raises_a_clear_error(suite):
    suite.record()
    suite.edit_golden(lambda d: d.update(golden_format=2))
    result = suite.run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*golden_format 2 is not this framework's 1*"])


def test_one_changed_number_fails_with_its_dotted_path(suite):
    suite.record()
    live = json.loads(suite.golden().read_text())["budget"]["max_active_seqs"]
    suite.edit_golden(lambda d: d["budget"].update(max_active_seqs=live + 1))
    result = suite.run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*fake 1.0.0 on gold-case differs from its golden*(1 field(s))*",
        f"*budget.max_active_seqs: expected {live + 1}, got {live} (differs)*",
    ])
