"""`conformance engines check` as a linter of what a `plan.log` engine file maps.

Contract: `lint(engine, sample_text=None, sample_name="")` returns findings, each `Finding(level, text)`
with level `error` (the file maps something the framework cannot use: exit non-zero) or `warning`
(something the checks will miss), every text naming the engine file and the JSON path or the line:
- error: a `fields` or `lists` path that is not in the observation schema (`memory.per_sequence.draft_bytes`
  where the schema has `draft_kv_bytes`), or a `lists` path that is not a list there;
- warning: an observation field the checks read (`wanted`: the check table's `reads`) that no rule maps
  (it stays null, and each check that needs it fails saying so), listed once per section;
- warning: a printed line (of `sample_text`: a sample log, or the port's own output on a case) that looks
  like a bound or a refusal and that no rule of the file maps (no field, list, message, fatal or
  trace_step regex matches it): a store "NOT counted by gpu_memory_utilization" that no `lists` rule
  reads is how a draft KV store beside the pool goes unseen.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from conformance import paths
from conformance.engines.engine_file import EngineFile, LogPlan

ERROR, WARNING = "error", "warning"
# Read by the checks but not a figure a dry run prints: lists (`lists` rules), containers, per-engine pools.
NOT_WANTED = ("memory.outside_bound", "memory.ledger_bytes", "memory.pool.size_bytes")
BOUND_WORDS = re.compile(r"not counted|outside the (?:pool|bound)|beside the pool|gpu_memory_utilization|"
                         r"(?<![-\w])bound(?![-\w])|memory limit|kv[_ ]cache[_ ]memory|--num-blocks|\bexceeds?\b.*\bmemory\b",
                         re.IGNORECASE)
REFUSAL_WORDS = re.compile(r"\bfatal\b|\brefus|\bcannot\b|\bcan't\b|\bunable\b|\btoo (?:small|large|many)\b|"
                           r"\bnot enough\b|\binsufficient\b|\bout of memory\b|\bOOM\b", re.IGNORECASE)


@dataclass(frozen=True)
class Finding:
    level: str
    text: str


def _schema() -> dict[str, Any]:
    return json.loads((paths.SCHEMAS_DIR / "observation.schema.json").read_text())


def schema_node(dotted: str, schema: dict[str, Any] | None = None) -> tuple[dict[str, Any] | None, str]:
    """The observation schema's node for `dotted`, or (None, why): every part must be a declared
    property, or lie under an object whose `additionalProperties` is a schema (ledger categories)."""
    node = schema or _schema()
    walked: list[str] = []
    for part in dotted.split("."):
        if _is_array(node) and isinstance(node.get("items"), dict):   # trace.steps.<field>: a field of each step
            node = node["items"]
        props = node.get("properties") or {}
        if part in props:
            node = props[part]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            where = ".".join(walked) or "the observation"
            return None, f"{where} has no field {part!r} (it has: {', '.join(sorted(props)) or 'none'})"
        walked.append(part)
    return node, ""


def wanted(schema: dict[str, Any] | None = None) -> list[str]:
    """The budget and memory figures the checks read (check_table `reads`), the ledger's required
    categories for `memory.ledger_bytes`, in a stable order."""
    from conformance.checks.check_table import CHECKS

    ledger = ((schema or _schema())["properties"]["memory"]["properties"]["ledger_bytes"]["required"])
    out: list[str] = []
    for check in CHECKS:
        for path in check.reads:
            paths_ = [f"memory.ledger_bytes.{c}" for c in ledger] if path == "memory.ledger_bytes" else [path]
            out += [p for p in paths_ if "." in p and p.split(".")[0] in ("budget", "memory") and p not in NOT_WANTED
                    and p not in out]
    return out


def _is_array(node: dict[str, Any]) -> bool:
    t = node.get("type")
    return t == "array" or (isinstance(t, list) and "array" in t)


def _regexes(plan: LogPlan) -> list[str]:
    out = [rule.regex for rule in plan.fields.values()] + [rx for _, _, rx in plan.lists]
    return out + [rx for rx in (plan.trace_step, plan.message, plan.fatal) if rx]


def unmapped_lines(plan: LogPlan, text: str) -> list[tuple[int, str, str]]:
    """(line number, line, what it looks like) of each printed line that looks like a bound or a
    refusal and that no rule of `plan` matches."""
    compiled = [re.compile(rx) for rx in _regexes(plan)]
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        looks = "a bound" if BOUND_WORDS.search(line) else ("a refusal" if REFUSAL_WORDS.search(line) else "")
        if looks and not any(rx.search(line) for rx in compiled):
            out.append((i, line.strip(), looks))
    return out


def lint(engine: EngineFile, sample_text: str | None = None, sample_name: str = "") -> list[Finding]:
    plan = engine.plan
    if not isinstance(plan, LogPlan):
        return []
    schema, where = _schema(), f"{engine.path}: plan.log"
    found: list[Finding] = []
    for dotted in plan.fields:
        node, why = schema_node(dotted, schema)
        if node is None:
            found.append(Finding(ERROR, f"{where}.fields.{dotted}: not in the observation schema: {why}"))
    for i, (dotted, _value, _rx) in enumerate(plan.lists):
        node, why = schema_node(dotted, schema)
        if node is None:
            found.append(Finding(ERROR, f"{where}.lists[{i}].path: {dotted!r} is not in the observation schema: {why}"))
        elif not _is_array(node):
            found.append(Finding(ERROR, f"{where}.lists[{i}].path: {dotted!r} is not a list in the observation schema"))
    missing = [f for f in wanted(schema) if f not in plan.fields]
    for section in ("budget", "memory"):
        names = [f for f in missing if f.startswith(section + ".")]
        if names:
            found.append(Finding(WARNING, f"{where}.fields: no rule for {', '.join(names)}: null in every observation, "
                                          f"and each check that reads it fails saying so"))
    if not plan.trace_step:
        found.append(Finding(WARNING, f"{where}.trace_step: no rule: the trace checks fail for want of a trace"))
    if sample_text is not None:
        for n, line, looks in unmapped_lines(plan, sample_text):
            found.append(Finding(WARNING, f"{sample_name}:{n}: looks like {looks} and no rule of {engine.path} maps "
                                          f"it (a `lists` rule for memory.outside_bound, a field, or `fatal`?): {line}"))
    return found
