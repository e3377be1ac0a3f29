"""What the checks share: a verdict from an observation, the figures an engine left null, and the
differences a case documents (`intended_differences`).

Contract: pure functions of documents; a failing message says what differs, by how much (bytes,
tokens, seats), what the oracle does, and which observation field it read.
"""

from __future__ import annotations

from typing import Any

from conformance.checks.verdicts import Verdict
from conformance.documents import units

MAX_DETAIL_LINES = 40
EVERY_ENGINE = "*"


def verdict(check: str, obs: dict[str, Any], outcome: str, message: str = "",
            diffs: list[Any] | tuple[Any, ...] = (), cause: str = "") -> Verdict:
    """One verdict on `obs`, its detail lines cut to MAX_DETAIL_LINES (the rest counted)."""
    lines = tuple(str(d) for d in diffs)
    if len(lines) > MAX_DETAIL_LINES:
        lines = lines[:MAX_DETAIL_LINES] + (f"... and {len(lines) - MAX_DETAIL_LINES} more",)
    return Verdict(check, obs["engine"]["name"], obs["case_id"], outcome, message, lines, cause)


def engine_label(doc: dict[str, Any]) -> str:
    """`vllm 0.33.0`: a document's engine name and version."""
    e = doc.get("engine") or {}
    return f"{e.get('name', '?')} {e.get('version', '?')}"


def human_bytes(n: float | None) -> str:
    return units.human_bytes(n, none="null")


def by(mine: Any, theirs: Any, unit: str) -> str:
    """`(+16 tokens)`: how far `mine` is from `theirs`, where both are numbers."""
    if isinstance(mine, (int, float)) and isinstance(theirs, (int, float)) and not isinstance(mine, bool):
        d = mine - theirs
        if unit == "bytes":
            return f" ({'+' if d >= 0 else '-'}{human_bytes(abs(d))}, {d:+d} B)" if isinstance(d, int) else f" ({d:+.3f} B)"
        return f" ({d:+g} {unit})"
    return ""


def null_fields(section: str, doc: dict[str, Any] | None, names: tuple[str, ...] | list[str]) -> list[str]:
    """The dotted paths (`memory.ledger_bytes.draft_kv`) of `names` in `doc` that are null or absent:
    figures the engine did not report. A check that needs one fails naming it, never reading it as 0."""
    doc = doc if isinstance(doc, dict) else {}
    return [f"{section}.{n}" for n in names if doc.get(n) is None]


def not_reported(paths: list[str]) -> str:
    return (f"{', '.join(paths)} {'is' if len(paths) == 1 else 'are'} null: the engine did not report "
            f"{'it' if len(paths) == 1 else 'them'}, and this check needs {'it' if len(paths) == 1 else 'them'}")


def intended(case_spec: dict[str, Any], oracle: str, field_name: str, engine: str) -> dict[str, Any] | None:
    """The case's `intended_differences` entry for (oracle, field) that documents `engine` (named in
    the entry's `engines`, or `*` there: every engine under test), if it declares one. An entry of
    another engine never binds this one: it is judged by the check's own rule."""
    for d in case_spec.get("intended_differences", []):
        if (d["oracle"] == oracle and d["field"] in (field_name, f"budget.{field_name}")
                and (engine in d["engines"] or EVERY_ENGINE in d["engines"])):
            return d
    return None


def whom(entry: dict[str, Any], engine: str) -> str:
    """How a documented difference names the engine it binds: `every engine under test (X)` or `X`."""
    return f"every engine under test ({engine})" if EVERY_ENGINE in entry["engines"] else engine


def documents_status_difference(case_spec: dict[str, Any], oracle: str, engine: str) -> bool:
    return intended(case_spec, oracle, "status", engine) is not None
