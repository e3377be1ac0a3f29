"""What the harness accepts from an engine: one observation, stamped with the engine file's name
and validated; anything else becomes an `error` observation that says what was wrong.

Contract: `accept_document(engine, case, text, source)` never raises for what an engine wrote;
`fail(engine, case, message)` is the `error` observation of a case; `stamp(engine, obs)` puts the
engine file's name on an observation (keeping the name the engine reported as `reported_name`).
"""

from __future__ import annotations

import json
from typing import Any

from conformance.documents import observation
from conformance.documents.cases import Case
from conformance.engines.engine_file import EngineFile
from conformance.harness.engine_version import resolved_version


def stamp(spec: EngineFile, obs: dict[str, Any]) -> dict[str, Any]:
    """The engine file's name on an observation (what the harness ran is what it is called), and
    its declared version where the engine reported none."""
    e = obs.get("engine")
    if isinstance(e, dict):
        if e.get("name") != spec.name:
            e["reported_name"] = e.get("name")
            e["name"] = spec.name
        if not e.get("version"):
            e["version"] = resolved_version(spec)
    return obs


def fail(spec: EngineFile, case: Case, message: str) -> dict[str, Any]:
    return observation.failed(case.id, spec.name, resolved_version(spec), "plan", case.spec["device"], "error", message)


def accept_document(spec: EngineFile, case: Case, text: str, source: str) -> dict[str, Any]:
    """One observation from an engine's JSON text, stamped and validated; an `error` observation
    naming what is wrong otherwise."""
    try:
        obs = json.loads(text)
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        return fail(spec, case, f"{source}: the engine wrote output that is not JSON ({why}): {text[:200]!r}")
    if isinstance(obs, dict):
        stamp(spec, obs)
    try:
        observation.validate(obs, source)
    except observation.ObservationError as exc:
        return fail(spec, case, f"{source}: the engine wrote a schema-invalid observation:\n{exc}")
    if obs.get("case_id") != case.id:
        return fail(spec, case, f"{source}: the engine answered case {obs.get('case_id')!r} where {case.id!r} was due")
    return obs


