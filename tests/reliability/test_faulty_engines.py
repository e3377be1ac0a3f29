"""Failing engines: every way an adapter process can fail becomes an `error` observation.

Each fault is real: a fake adapter module (tests/fixtures/faulty_adapters/) run through the real
`python -m conformance.harness.probe` by the real runner (`plan_cases`), or a fake probe through the
runner's `argv_prefix`. The cases are [good-first, the-fault, good-last]: the fault hits the
middle one, and the last one must still be planned (in a fresh process when the first died).
"""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import pytest
import yaml

from conformance.documents import observation
from conformance.documents.cases import Case, find_case, load_case
from conformance.engines.engine_file import EngineFile, ModulePlan
from conformance.harness.plan_runner import plan_cases

ADAPTERS = "tests.fixtures.faulty_adapters"


def make_cases(directory: Path, ids: list[str]) -> list[Case]:
    base = yaml.safe_load(find_case("tiny-dflash-c4-k8").path.read_text())
    out = []
    for case_id in ids:
        doc = copy.deepcopy(base)
        doc["id"] = case_id
        f = directory / f"{case_id}.yaml"
        f.write_text(yaml.safe_dump(doc, sort_keys=False))
        out.append(load_case(f))
    return out


def faulty(module: str, startup_timeout_s: float = 60.0, per_case_timeout_s: float = 60.0) -> EngineFile:
    return EngineFile(name="faulty", role="under-test", version="0",
                      plan=ModulePlan(f"{ADAPTERS}.{module}", startup_timeout_s=startup_timeout_s,
                                      per_case_timeout_s=per_case_timeout_s))


def run(spec: EngineFile, tmp_path: Path, ids=("good-first", "the-fault", "good-last"), argv_prefix=None):
    cases = make_cases(tmp_path, list(ids))
    seen: list[dict] = []
    logs = tmp_path / "logs"
    got = plan_cases(spec, cases, on_observation=seen.append, log_dir=logs, argv_prefix=argv_prefix)
    assert got == seen, "on_observation must see every observation, in order"
    assert [o["case_id"] for o in got] == list(ids)
    for o in got:
        observation.validate(o, f"runner output for {o['case_id']}")
    return got, logs


def num_processes(logs: Path) -> int:
    return len(list(logs.glob("faulty-*.log")))


CRASHES = [
    # module, the cause the message must give, the marker its stderr tail must show
    ("exit_mid_case", "adapter process exited with code 1 while planning this case", "os._exit(1) on case the-fault"),
    ("segfault", "adapter process was killed by SIGSEGV while planning this case", "SIGSEGV on case the-fault"),
    ("oom_killed", "adapter process was killed by SIGKILL (killed: out of memory?) while planning this case",
     "SIGKILL (as the OOM killer would) on case the-fault"),
    ("exit_zero_silently", "adapter process exited 0 without writing an observation for this case",
     "os._exit(0) without an observation on case the-fault"),
]


@pytest.mark.parametrize("module,cause,marker", CRASHES, ids=[c[0] for c in CRASHES])
def test_crash_is_an_error_and_the_run_goes_on(module, cause, marker, tmp_path):
    got, logs = run(faulty(module), tmp_path)
    assert [o["status"] for o in got] == ["ok", "error", "ok"], [o["message"] for o in got]
    message = got[1]["message"]
    assert message.startswith(cause), message
    assert "--- last lines of" in message and f"faulty adapter: {marker}" in message, message
    assert num_processes(logs) == 2, "the case after the crash is planned in a fresh process"
    print(f"\n{module}: {message}")


def test_import_error_fails_every_case_with_the_traceback(tmp_path):
    got, logs = run(faulty("raise_on_import"), tmp_path)
    assert [o["status"] for o in got] == ["error"] * 3
    for o in got:
        assert o["message"].startswith("adapter could not be loaded in the engine's environment"), o["message"]
        assert "RuntimeError: faulty adapter: import fails on purpose" in o["message"], o["message"]
    assert num_processes(logs) == 1, "a module that cannot load is not retried once per case"
    print(f"\nraise_on_import: {got[0]['message']}")


def test_hang_is_killed_after_its_timeout(tmp_path):
    got, logs = run(faulty("hang", per_case_timeout_s=2.0), tmp_path)
    assert [o["status"] for o in got] == ["ok", "error", "ok"]
    message = got[1]["message"]
    assert message.startswith("timed out: no observation within 2 s (killed)"), message
    assert "faulty adapter: hanging on case the-fault" in message
    pid = int((tmp_path / "hang.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the hung process is gone, not left running
    print(f"\nhang: {message}")


def test_hang_at_startup_is_killed_after_the_startup_timeout(tmp_path):
    got, _ = run(faulty("hang_on_import", startup_timeout_s=2.0, per_case_timeout_s=1.0), tmp_path, ids=("the-fault",))
    message = got[0]["message"]
    assert got[0]["status"] == "error"
    assert message.startswith("timed out: no observation within 3 s of starting the adapter"), message
    assert "startup_timeout_s 2 s" in message and "faulty adapter: hanging during import" in message, message
    print(f"\nhang_on_import: {message}")


def test_out_of_memory_under_rlimit_is_an_error_and_the_process_survives(tmp_path):
    got, logs = run(faulty("oom_rlimit"), tmp_path)
    assert [o["status"] for o in got] == ["ok", "error", "ok"]
    message = got[1]["message"]
    assert message.startswith("MemoryError"), message
    assert "bytearray(CHUNK_BYTES)" in message, "the traceback's tail shows where the allocation failed"
    log = (logs / "faulty-0.log").read_text()
    assert "faulty adapter: MemoryError after" in log, log
    assert num_processes(logs) == 1, "the probe caught the MemoryError; no restart was needed"
    print(f"\noom_rlimit: {message.splitlines()[0]}")


@pytest.mark.parametrize("module,paths", [
    ("schema_invalid", ["status: 'maybe' is not one of", "memory.pool.num_blocks: -3 is less than the minimum of 0"]),
    ("non_finite", ["memory.max_concurrency: nan is not a finite number"]),
])
def test_schema_invalid_observation_is_an_error_naming_the_path(module, paths, tmp_path):
    got, logs = run(faulty(module), tmp_path)
    assert [o["status"] for o in got] == ["ok", "error", "ok"]
    message = got[1]["message"]
    assert message.startswith("adapter produced a schema-invalid observation"), message
    for p in paths:
        assert p in message, message
    print(f"\n{module}: {message}")


def test_unserializable_observation_is_an_error_without_a_crash(tmp_path):
    got, logs = run(faulty("not_serializable"), tmp_path)
    assert [o["status"] for o in got] == ["ok", "error", "ok"]
    message = got[1]["message"]
    assert message.startswith("adapter produced an observation that is not JSON"), message
    assert "set is not JSON serializable" in message, message
    assert num_processes(logs) == 1, "one bad observation must not kill the adapter process"
    print(f"\nnot_serializable: {message}")


FAKE_PROBE = [
    ("non_json", "is not JSON", "budget: lots, memory: enough"),
    ("wrong_case", "the engine answered case 'someone-else' where 'the-fault' was due", None),
    ("partial", "adapter process exited with code 1 while planning this case; unterminated output:",
     "fake probe: dying mid-line on the-fault"),
    ("silent", "adapter process exited 0 without writing an observation for this case",
     "fake probe: exiting 0 with nothing written for the-fault"),
]


@pytest.mark.parametrize("mode,cause,detail", FAKE_PROBE, ids=[f[0] for f in FAKE_PROBE])
def test_bad_lines_in_the_observation_file(mode, cause, detail, tmp_path):
    argv = [sys.executable, "-m", f"{ADAPTERS}.fake_probe", "--mode", mode]
    got, _ = run(faulty("unused"), tmp_path, argv_prefix=argv)
    assert [o["status"] for o in got] == ["ok", "error", "ok"], [o["message"] for o in got]
    message = got[1]["message"]
    assert cause in message, message
    if detail:
        assert detail in message, message
    print(f"\nfake probe {mode}: {message}")


def test_observations_are_delivered_while_the_engine_still_runs(tmp_path):
    """The adapter answers its second case only after the harness received the first: if
    on_observation were called at the end, the second case would time out inside the adapter."""
    cases = make_cases(tmp_path, ["flush-first", "flush-second"])
    flag = tmp_path / "delivered.flag"

    def on_observation(obs):
        if obs["case_id"] == "flush-first":
            flag.write_text("delivered\n")

    got = plan_cases(faulty("waits_for_delivery"), cases, on_observation=on_observation, log_dir=tmp_path / "logs")
    assert [o["status"] for o in got] == ["ok", "ok"], [o["message"] for o in got]
