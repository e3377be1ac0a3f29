"""An engine's role, and the roles of a run as its record holds them.

An engine file's `role` decides what is judged: an `oracle` (vLLM, SGLang) is the expectation, an
`under-test` engine is judged by every check against the oracles. Checks are keyed by role, never by
an engine's name.

Contract: `ORACLE`, `UNDER_TEST` and `ROLES` (= `BOTH`, every role) are the one spelling of the roles.
`recorded_roles(meta)` is each engine's role as a run recorded it when it resolved its engines (the
`engines` of its run.json, `run.rundir`); nothing is resolved again from engine files. `role_in(roles,
engine)` is that role, `UNDER_TEST` for an engine the record does not name: nothing passes for want
of a role.
"""

from __future__ import annotations

from typing import Any, Mapping

ORACLE, UNDER_TEST = "oracle", "under-test"
ROLES = BOTH = (ORACLE, UNDER_TEST)


def recorded_roles(meta: Mapping[str, Any] | None) -> dict[str, str]:
    """{engine name: role} of every engine the run's record names with a role."""
    return {e["name"]: e["role"] for e in (meta or {}).get("engines") or () if e.get("role") in ROLES}


def role_in(roles: Mapping[str, str], engine: str) -> str:
    return roles.get(engine, UNDER_TEST)
