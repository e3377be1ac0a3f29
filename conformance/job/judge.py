"""Judge a run's observations with the check table (`conformance.check_table`), as the suites do.

Contract: the run's verdicts are `check_table.judge_run(case_specs, observations, roles)`;
`judge_case(case_spec, observations_by_engine)` is the same for one case; `roles_from_meta(meta, names)` gives each engine's role as
the run recorded it, resolving an engine the run did not record by its file (an engine whose role
cannot be found is judged as under test: nothing passes for want of a role).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from conformance.check_table import UNDER_TEST, GoldenLookup, judge_run
from conformance.verdicts import Verdict


def roles_from_meta(meta: Mapping[str, Any] | None, names: Iterable[str]) -> dict[str, str]:
    roles = {e["name"]: e["role"] for e in (meta or {}).get("engines", []) if e.get("role")}
    for name in names:
        if name not in roles:
            from conformance.errors import ConformanceError
            from conformance.harness.registry import resolve_engine

            try:
                roles[name] = resolve_engine(name).role
            except ConformanceError:
                roles[name] = UNDER_TEST
    return roles


def judge_case(case_spec: Mapping[str, Any], observations: Mapping[str, dict[str, Any]],
               roles: Mapping[str, str] | None = None, lookup: GoldenLookup | None = None) -> list[Verdict]:
    """One case's verdicts, `observations` by engine (cross-case checks skip: their partner is absent)."""
    by_key = {(case_spec["id"], e): o for e, o in observations.items()}
    return judge_run([case_spec], by_key, roles or roles_from_meta(None, observations), lookup)
