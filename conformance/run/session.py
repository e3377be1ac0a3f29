"""A run session: the one place where case selection, engine resolution, environment installation,
planning and judging meet. `conformance run` (`run.execute`), `conformance plan` and the pytest plugin
go through it; the run directory (`run.rundir`) stores and loads what it gives, and never judges.

Contract:
- `open_session(cases, engines, cases_dir, live, default, required)` selects the cases (`--cases`, one
  syntax in every face: `run.selection`) and resolves the engines once (`--engines`, a comma list of
  shipped names, entry points or engine files; none: every known engine). Bad input raises
  `ConformanceError` naming it. `Session.roles` is each engine's role as resolved here; `conformance run`
  records it in run.json, and the report reads it back from there (`roles.recorded_roles`).
- `install_env(engine, say, no_build)` makes an engine ready to plan: its pinned venv installed where it
  plans in one (built when not cached, saying so through `say`). None when ready; with `no_build`, the
  reason it is skipped when its venv is not cached. A venv that cannot be built raises `OracleEnvError`.
- `plan(engine, cases, say, ...)` installs the engine's environment, then plans the cases in one adapter
  process (`harness.plan_runner.plan_cases`): one observation per case.
- `golden_lookup(roles, goldens_dir)` finds goldens, each engine's in its role's directory, each read once.
- `judge(cases, observations, roles, goldens_dir)` is every verdict of the check table
  (`check_table.judge_run`) on the observations by (case id, engine).
- `judge_observations(run_dir)` judges a run directory's observations with the roles and goldens directory
  its run.json records (an engine it records no role for is under test), and writes nothing: `conformance
  package` and `verify` judge a packaged run so. `judge_run_dir(run_dir)` also stores the verdicts in it
  (`rundir.write_verdicts`): `conformance run` does so when it finishes, `conformance report` and `merge`
  when they judge again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from conformance.checks.check_table import GoldenLookup, judge_run, memoized
from conformance.checks.goldens import golden_lookup as role_golden_lookup
from conformance.checks.verdicts import Verdict
from conformance.documents.cases import Case
from conformance.engines.engine_file import EngineFile
from conformance.engines.envs import install
from conformance.engines.registry import resolve_engines
from conformance.engines.roles import recorded_roles
from conformance.engines.venv import oracle_env
from conformance.harness.plan_runner import OnObservation, plan_cases
from conformance.run import rundir
from conformance.run.selection import DEFAULT_SELECTION, Selection, select_cases

Say = Callable[[str], None]


@dataclass(frozen=True)
class Session:
    cases: tuple[Case, ...]
    selection: str                      # the selection in words (run.json's `selection`)
    engines: tuple[EngineFile, ...]     # resolved once, one per name

    @property
    def roles(self) -> dict[str, str]:
        return roles_of(self.engines)


def roles_of(engines: Iterable[EngineFile]) -> dict[str, str]:
    return {e.name: e.role for e in engines}


def open_session(cases: Iterable[str] | str | None, engines: str | None, cases_dir: Path | None = None,
                 live: bool | None = False, default: Selection = DEFAULT_SELECTION,
                 required: bool = True) -> Session:
    selected, described = select_cases(cases, cases_dir, live=live, default=default, required=required)
    return Session(tuple(selected), described, tuple(resolve_engines(engines)))


def install_env(engine: EngineFile, say: Say, no_build: bool = False) -> str | None:
    if not engine.uses_venv:
        return None
    env = oracle_env(engine)
    if env.state() != "ready":
        if no_build:
            return f"venv {env.path} is {env.state()} and --no-build was given"
        say(f"{engine.name}: building its pinned venv ({env.state()})")
    install(engine, progress=say)
    return None


def plan(engine: EngineFile, cases: Sequence[Case], say: Say, on_observation: OnObservation | None = None,
         log_dir: Path | None = None) -> list[dict[str, Any]]:
    install_env(engine, say)
    return plan_cases(engine, cases, on_observation=on_observation, log_dir=log_dir)


def golden_lookup(roles: Mapping[str, str], goldens_dir: Path | None) -> GoldenLookup:
    return memoized(role_golden_lookup(roles, goldens_dir))


def judge(cases: Iterable[Mapping[str, Any]], observations: Mapping[tuple[str, str], dict[str, Any]],
          roles: Mapping[str, str], goldens_dir: Path | None = None) -> list[Verdict]:
    return judge_run(cases, observations, roles, golden_lookup(roles, goldens_dir))


def judge_observations(run_dir: Path) -> list[Verdict]:
    loaded = rundir.load_observations(Path(run_dir))
    goldens_dir = loaded.meta.get("goldens_dir")
    return judge([dict(c.spec, id=c.id) for c in loaded.cases], loaded.observations,
                 recorded_roles(loaded.meta), Path(goldens_dir) if goldens_dir else None)


def judge_run_dir(run_dir: Path) -> list[Verdict]:
    verdicts = judge_observations(run_dir)
    rundir.write_verdicts(Path(run_dir), verdicts)
    return verdicts
