"""Reliability tests: shared fixtures and the fuzz summary printed at the end of the session."""

from __future__ import annotations

import pytest

from .fuzz_tally import FuzzTally

_TALLY = pytest.StashKey[FuzzTally]()


@pytest.fixture(scope="session")
def fuzz_tally(request: pytest.FixtureRequest) -> FuzzTally:
    return request.config.stash.setdefault(_TALLY, FuzzTally())


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    tally = config.stash.get(_TALLY, None)
    if tally is None or not (tally.num_examples or tally.num_cli_runs):
        return
    terminalreporter.section("case fuzz summary")
    for line in tally.lines():
        terminalreporter.write_line(line)


# Cases planned three times, each run in its own adapter process, per engine (determinism), the
# first run also serving the impossible-case checks.
PLANNED_CASES = ("tiny-dflash-c4-k8", "impossible-k-past-drafter-block", "impossible-max-model-len-past-positions")
NUM_RUNS = 3


@pytest.fixture(scope="session")
def planned_three_times(tmp_path_factory):
    """`planned_three_times(engine)`: NUM_RUNS lists of observations of PLANNED_CASES, one adapter
    process per run. Oracles are used only where their venv is ready (never built here)."""
    from conformance.harness.plan_runner import plan_cases
    from conformance.documents.cases import find_case
    from conformance.engines.registry import resolve_engine

    runs_by_engine: dict[str, list[list[dict]]] = {}

    def get(engine: str) -> list[list[dict]]:
        if engine not in runs_by_engine:
            spec = resolve_engine(engine)
            if spec.uses_venv:
                from conformance.engines.venv import oracle_env

                env = oracle_env(spec)
                if env.state() != "ready":
                    pytest.skip(f"{engine} venv {env.path} is {env.state()}: `conformance envs install {engine}`")
            cases = [find_case(c) for c in PLANNED_CASES]
            root = tmp_path_factory.mktemp(f"planned-{engine}")
            runs_by_engine[engine] = [plan_cases(spec, cases, log_dir=root / f"run-{i}") for i in range(NUM_RUNS)]
        return runs_by_engine[engine]

    return get
