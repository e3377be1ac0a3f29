"""pytest plugin (entry point `pytest11: dflash_conformance`): cases x engines for the suites.

A suite test asks for `engine`, `case` and `observation` (and `golden` for its syrupy
snapshot). The plugin parametrizes every such test over the selected engines and cases
(`@pytest.mark.engines(...)` and `@pytest.mark.cases(glob, ...)` narrow it), plans every
needed case once per engine per session in one adapter process (shared across xdist workers
through a file-locked store), and can write an HTML parity report (`--parity-report DIR`).

Options: --engines reference,vllm,sglang   --cases 'tiny-*'   --parity-report DIR
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from conformance import paths
from conformance.cases import Case, load_all, select
from conformance.engines import ENGINES

_CASES = pytest.StashKey[dict]()
_NEEDED = pytest.StashKey[dict]()
_RESULTS = pytest.StashKey[list]()


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("dflash-conformance")
    g.addoption("--engines", default=",".join(ENGINES), help="engines to run the suites on (comma list)")
    g.addoption("--cases", default="", help="glob patterns over case ids (comma list; default all)")
    g.addoption("--cases-dir", default=None, help="case directory (default suites/cases)")
    g.addoption("--parity-report", default=None, metavar="DIR", help="write the HTML parity report here")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "engines(*names): engines this suite test applies to")
    config.addinivalue_line("markers", "cases(*globs): cases (glob over ids) this suite test applies to")
    config.stash[_NEEDED] = {}
    config.stash[_RESULTS] = []
    config.pluginmanager.register(_VerdictCollector(config), "dflash-conformance-verdicts")
    _pin_worker_gpu(config)


def _pin_worker_gpu(config: pytest.Config) -> None:
    """With `-m gpu -n N`, give xdist worker gwK the K-th visible GPU (before CUDA initialises)."""
    worker = _xdist_worker_id(config)
    markexpr = config.getoption("markexpr", "") or ""
    if not worker or "gpu" not in markexpr or "not gpu" in markexpr:
        return
    from conformance.gpu_pinning import device_for_worker, nvidia_smi_count, visible_gpus

    visible = visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"), nvidia_smi_count())
    if not visible:
        return  # no GPU: the gpu tests skip themselves
    num_workers = int(config.workerinput.get("workercount", 1))
    os.environ["CUDA_VISIBLE_DEVICES"] = device_for_worker(worker, visible, num_workers)


def _all_cases(config: pytest.Config) -> dict[str, Case]:
    if _CASES not in config.stash:
        d = config.getoption("--cases-dir")
        pats = [p for p in config.getoption("--cases").split(",") if p]
        config.stash[_CASES] = {c.id: c for c in select(load_all(Path(d) if d else None), pats)}
    return config.stash[_CASES]


def _selected_engines(config: pytest.Config) -> list[str]:
    names = [n.strip() for n in config.getoption("--engines").split(",") if n.strip()]
    unknown = [n for n in names if n not in ENGINES]
    if unknown:
        raise pytest.UsageError(f"--engines: unknown engine(s) {', '.join(unknown)} (known: {', '.join(ENGINES)})")
    return names


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if not {"engine", "case"} <= set(metafunc.fixturenames):
        return
    engines = _selected_engines(metafunc.config)
    m = metafunc.definition.get_closest_marker("engines")
    if m:
        engines = [e for e in engines if e in m.args]
    cases = list(_all_cases(metafunc.config).values())
    m = metafunc.definition.get_closest_marker("cases")
    if m:
        cases = select(cases, m.args)
    params = [pytest.param(e, c, id=f"{e}-{c.id}") for e in engines for c in cases]
    metafunc.parametrize(("engine", "case"), params or [pytest.param(None, None, marks=pytest.mark.skip(
        reason="no (engine, case) selected"), id="none")])
    needed = metafunc.config.stash[_NEEDED]
    for e in engines:
        needed.setdefault(e, {}).update({c.id: c for c in cases})


def _xdist_worker_id(config: pytest.Config) -> str | None:
    """This process's xdist worker id (`gw0`...), or None in a controller or a plain run. Read from
    the config, not the environment: a pytest started inside a worker inherits its variables."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput.get("workerid") if workerinput else None


def _store_root(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.getbasetemp()
    if _xdist_worker_id(config):
        base = base.parent  # shared by every worker of this run
    return base / "observations"


@pytest.fixture(scope="session")
def observation_store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    from conformance.observe import ObservationStore

    return ObservationStore(_store_root(request.config, tmp_path_factory))


@pytest.fixture
def observation(request: pytest.FixtureRequest, engine: str, case: Case, observation_store) -> dict[str, Any]:
    """The observation of `engine` on `case` (plan mode), planned once per session per engine."""
    wanted = list(request.config.stash[_NEEDED].get(engine, {}).values()) or [case]
    got = observation_store.get(engine, wanted)
    obs = got[case.id]
    request.node.user_properties += [("engine", engine), ("case_id", case.id),
                                     ("observation", json.dumps(obs, sort_keys=True))]
    return obs


@pytest.fixture
def observations_of(request: pytest.FixtureRequest, observation_store):
    """`observations_of(engine, case)`: another engine's observation of the same case."""
    def get(engine: str, case: Case) -> dict[str, Any]:
        wanted = list(request.config.stash[_NEEDED].get(engine, {}).values()) or [case]
        if case.id not in {c.id for c in wanted}:
            wanted.append(case)
        return observation_store.get(engine, wanted)[case.id]
    return get


@pytest.fixture
def golden(snapshot):
    from conformance.goldens import GoldenExtension

    return snapshot.use_extension(GoldenExtension)


class _VerdictCollector:
    """Collects verdicts for the parity report; registered per config (runs in the xdist controller too)."""

    def __init__(self, config: pytest.Config):
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" and not (report.when == "setup" and report.outcome != "passed"):
            return
        props = dict(report.user_properties)
        self.config.stash[_RESULTS].append({
            "nodeid": report.nodeid, "outcome": report.outcome,
            "engine": props.get("engine"), "case_id": props.get("case_id"),
            "observation": json.loads(props["observation"]) if "observation" in props else None,
            "message": str(report.longrepr)[-4000:] if report.failed else "",
        })


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """Under --snapshot-update: what moved in every golden that was rewritten."""
    from conformance.goldens import UPDATE_PROPERTY

    moved = [value for reports in terminalreporter.stats.values() for r in reports
             if isinstance(r, pytest.TestReport) and r.when == "call"
             for key, value in r.user_properties if key == UPDATE_PROPERTY]
    if moved:
        terminalreporter.section("golden updates")
        for text in moved:
            terminalreporter.write_line(text)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    out = session.config.getoption("--parity-report")
    if not out or _xdist_worker_id(session.config):
        return
    from conformance.report.from_pytest import write_pytest_report

    write_pytest_report(session, Path(out), session.config.stash[_RESULTS])
