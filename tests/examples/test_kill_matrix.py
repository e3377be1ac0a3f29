"""The kill matrix: every defect of the stand-in port (examples/defective-port) fails the checks listed
here, through `conformance run` and through `pytest suites/` alike, and the sound port passes what the
reference passes. The matrix is held here, so weakening a check (or the port) fails CI.

Each defect is one engine file (`defects: [name]`) of the same port; all of them, the sound port and
the reference are planned in ONE `conformance run` and ONE `pytest suites/` session over KILL_CASES.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from conformance import paths
from conformance.run.rundir import load_report, resolve_run_dir

PORT_DIR = paths.REPO_ROOT / "examples" / "defective-port"
KILL_CASES = ("seed-draft-kv-c8", "seed-draft-kv-c32", "seed-unified-pool-c32-k8", "seed-unified-pool-c32-k8-small",
              "seed-drafting-reservation-pard",
              "drafting-table-dflash", "drafting-table-pard", "drafting-table-p-eagle", "drafting-table-draft_model",
              "tiny-pressure-none-preempt", "tiny-dflash-c32-k8-align", "tiny-dflash-c4-k8")

# defect -> every check it fails on KILL_CASES (as the checks stand; a weaker check drops out of a row)
KILL_MATRIX: dict[str, set[str]] = {
    "draft-kv-outside-bound": {"memory.draft_kv_scaling", "memory.inside_bound", "memory.ledger_holds_seats", "memory.per_sequence_equals_vllm", "memory.seats_equal_vllm", "memory.unified_pool_seats", "trace.equals_vllm"},
    # a plan that does not say where its draft KV lives passes no bound check
    "draft-kv-hidden": {"memory.draft_kv_scaling", "memory.inside_bound", "memory.ledger_holds_seats", "memory.per_sequence_equals_vllm", "memory.seats_equal_vllm", "memory.unified_pool_seats", "trace.equals_vllm"},
    "two-pools": {"budget.parity_with_vllm", "memory.per_sequence_equals_vllm", "memory.seats_equal_vllm", "memory.unified_pool_seats", "trace.equals_vllm"},
    # its ledger holds 0 B of draft KV beside a sequence's 170 MB: where the draft KV lives is not said
    "two-pools-unified-seats": {"memory.draft_kv_scaling", "memory.inside_bound", "memory.ledger_holds_seats", "memory.unified_pool_seats"},
    "no-drafting-reservation": {"budget.parity_with_vllm", "trace.equals_vllm", "trace.steps_within_budget"},
    "state-slots-k": {"memory.per_sequence_equals_vllm", "memory.seats_equal_vllm", "trace.equals_vllm"},
    "prefix-caching-state-slots": {"memory.per_sequence_equals_vllm", "memory.seats_equal_vllm"},
    "dflash-lookahead-k": {"budget.parity_with_vllm", "trace.equals_vllm"},
    "p-eagle-k-slots": {"budget.parity_with_vllm", "trace.equals_vllm"},
    "pard-as-draft-model": {"budget.parity_with_vllm", "trace.equals_vllm", "trace.steps_within_budget"},
    "no-null-block": {"trace.equals_vllm"},
    "unaligned-block-size": {"memory.per_sequence_equals_vllm", "memory.seats_equal_vllm", "trace.equals_vllm"},
    "unpadded-state-pages": {"memory.per_sequence_equals_vllm"},
    "overrun-after-chunked-prefill": {"trace.equals_vllm", "trace.steps_within_budget"},
    # a null ledger does not say where the DFlash draft KV lives either: no bound check passes on it
    "unreported-ledger": {"memory.draft_kv_scaling", "memory.inside_bound", "memory.ledger_holds_seats",
                          "memory.unified_pool_seats"},
    "unreported-budget": {"budget.parity_with_vllm", "budget.active_seqs_not_below_sglang", "memory.ledger_holds_seats",
                          "memory.unified_pool_seats", "memory.explains_short_seats", "memory.draft_kv_scaling",
                          "trace.steps_within_budget"},
}
SEED_BUGS = ("draft-kv-outside-bound", "two-pools", "no-drafting-reservation")


def port_names() -> list[str]:
    import importlib.util

    spec = importlib.util.spec_from_file_location("defective_port", PORT_DIR / "port.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return list(mod.DEFECTS)


def engine_files(directory: Path) -> dict[str, Path]:
    """port-sound and one port-<defect> engine file per defect, all running examples/defective-port/port.py."""
    base = yaml.safe_load((PORT_DIR / "engine.yaml").read_text())
    out = {}
    for defect in [None] + list(KILL_MATRIX):
        doc = dict(base, name=f"port-{defect}" if defect else "port-sound", defects=[defect] if defect else [])
        doc["plan"] = {"command": dict(base["plan"]["command"],
                                       argv=["{python}", str(PORT_DIR / "port.py"), "--defects", "{defects}"])}
        f = directory / f"{doc['name']}.yaml"
        f.write_text(yaml.safe_dump(doc, sort_keys=False))
        out[defect or "sound"] = f
    return out


def failing_checks(verdicts) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for v in verdicts:
        if v["outcome"] == "fail":
            out[v["engine"]].add(v["check"])
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    return engine_files(tmp_path_factory.mktemp("port-engines"))


@pytest.fixture(scope="module")
def job_verdicts(files, tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("reports")
    engines = ",".join(["reference"] + [str(f) for f in files.values()])
    run = subprocess.run([sys.executable, "-m", "conformance", "run", "--engines", engines, "--cases", *KILL_CASES,
                          "--out", str(out)], capture_output=True, text=True, cwd=str(paths.REPO_ROOT), timeout=1800)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]   # defects fail checks: exit 1
    run_dir = resolve_run_dir(out / "latest")
    html = (run_dir / "index.html").read_text()
    assert "Defects and the checks that kill them" in html
    return [v.to_json() for v in load_report(run_dir).verdicts]


@pytest.fixture(scope="module")
def suite_verdicts(files, tmp_path_factory) -> list[dict]:
    f = tmp_path_factory.mktemp("suites") / "verdicts.jsonl"
    engines = ",".join(["reference"] + [str(p) for p in files.values()])
    run = subprocess.run([sys.executable, "-m", "pytest", "suites/budget", "suites/memory", "suites/trace",
                          "--engines", engines, "--cases", ",".join(KILL_CASES), "-p", "no:cacheprovider", "-q",
                          "--verdicts-out", str(f)], capture_output=True, text=True, cwd=str(paths.REPO_ROOT),
                         timeout=1800)
    assert run.returncode == 1, run.stdout[-3000:]
    return [json.loads(line) for line in f.read_text().splitlines()]


def test_the_matrix_covers_every_defect_of_the_port():
    assert set(KILL_MATRIX) == set(port_names())
    assert len(KILL_MATRIX) >= 11 and set(SEED_BUGS) <= set(KILL_MATRIX)


def test_every_defect_is_killed_by_the_checks_of_the_matrix_in_conformance_run(job_verdicts):
    got = failing_checks(job_verdicts)
    assert {d: got.get(f"port-{d}", set()) for d in KILL_MATRIX} == KILL_MATRIX


def test_pytest_suites_kill_the_same_defects_with_the_same_checks(job_verdicts, suite_verdicts):
    got = failing_checks(suite_verdicts)
    assert {d: got.get(f"port-{d}", set()) for d in KILL_MATRIX} == KILL_MATRIX
    as_set = lambda vs: {(v["check"], v["engine"], v["case_id"], v["outcome"]) for v in vs}  # noqa: E731
    assert as_set(suite_verdicts) == as_set(job_verdicts)


def test_the_sound_port_passes_what_the_reference_passes(job_verdicts):
    by_engine: dict[str, dict[tuple[str, str], str]] = defaultdict(dict)
    for v in job_verdicts:
        if not v["check"].endswith(".golden"):   # the port keeps no goldens of its own
            by_engine[v["engine"]][(v["check"], v["case_id"])] = v["outcome"]
    assert by_engine["port-sound"] == by_engine["reference"]
    assert "fail" not in by_engine["port-sound"].values()


def test_each_failure_says_what_differs_by_how_much_and_what_vllm_does(job_verdicts):
    for defect in KILL_MATRIX:
        failures = [v for v in job_verdicts if v["engine"] == f"port-{defect}" and v["outcome"] == "fail"]
        assert failures, defect
        for v in failures:
            text = v["message"] + " " + " ".join(v["details"])
            assert any(ch.isdigit() for ch in text), (defect, v)                    # by how much
            assert any(w in text for w in ("vLLM", "vllm", "bound", "SGLang", "budget")), (defect, v)
