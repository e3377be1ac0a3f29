"""Observations: one JSON document per (engine, case, mode).

Contract: every observation that leaves an adapter or enters the harness passes
`validate(obs, source)`; failures raise `ObservationError` naming the JSON path.
Adapters report what happened; verdicts are computed elsewhere (`conformance.checks`).
`BUDGET_FIELDS` and `STEP_FIELDS` are the budget's and a trace step's fields as the observation
schema requires them (schemas/observation.schema.json), in its order: the one list of each.
"""

from __future__ import annotations

from typing import Any

from conformance.documents.schemas import error_lines, load_schema
from conformance.errors import ConformanceError

SCHEMA_VERSION = "1"

# Fields that carry wall-clock time or host facts: excluded from determinism checks and
# golden comparison by this explicit list (JSON paths, dot-separated).
VOLATILE_FIELDS: tuple[str, ...] = ("timing",)

_SECTIONS = load_schema("observation")["properties"]
BUDGET_FIELDS: tuple[str, ...] = tuple(_SECTIONS["budget"]["required"])
STEP_FIELDS: tuple[str, ...] = tuple(_SECTIONS["trace"]["properties"]["steps"]["items"]["required"])


class ObservationError(ConformanceError):
    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


def new(case_id: str, engine: str, version: str, mode: str, device_profile: str) -> dict[str, Any]:
    """An empty `ok` observation for an adapter to fill."""
    return {
        "schema_version": SCHEMA_VERSION,
        "case_id": case_id,
        "engine": {"name": engine, "version": version},
        "mode": mode,
        "status": "ok",
        "message": None,
        "device": {"profile": device_profile, "hardware": None},
        "budget": None,
        "memory": None,
        "trace": None,
        "throughput": None,
        "provenance": {"functions": [], "overrides": [], "glue": [], "mapping": {}},
    }


def failed(case_id: str, engine: str, version: str, mode: str, device_profile: str,
           status: str, message: str, **extra: Any) -> dict[str, Any]:
    """A `refused` or `error` observation; `message` is the engine's own words or the cause."""
    if status not in ("refused", "error"):
        raise ValueError(f"status must be refused or error, got {status!r}")
    obs = new(case_id, engine, version, mode, device_profile)
    obs["status"] = status
    obs["message"] = message or f"{engine} gave no message"
    for key, value in extra.items():
        obs[key] = value
    return obs


def validate(obs: Any, source: str) -> dict[str, Any]:
    problems = error_lines("observation", obs, source)
    if problems:
        raise ObservationError(problems)
    return obs


def strip_volatile(obs: dict[str, Any]) -> dict[str, Any]:
    """A copy without the `VOLATILE_FIELDS` (for determinism and golden comparison)."""
    import copy

    out = copy.deepcopy(obs)
    for dotted in VOLATILE_FIELDS:
        node: Any = out
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.get(p) if isinstance(node, dict) else None
            if node is None:
                break
        if isinstance(node, dict):
            node.pop(leaf, None)
    return out
