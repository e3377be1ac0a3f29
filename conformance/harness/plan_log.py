"""A dry run's output lines as an observation: the `plan.log` kind of engine file.

Contract: `build_observation(plan, text, case, engine, version)` returns a plan-mode observation
(not yet validated) whose fields are exactly what the engine file's regexes found in `text`:
every `fields` entry sets its dotted path (`budget.max_num_scheduled_tokens`,
`memory.ledger_bytes.draft_kv`, `message`) from the first match's first group; `message` (the
engine file's `plan.log.message` regex) sets the observation's message from its first match's first
group; every `lists` entry appends its value where its regex matches a line; every line matching
`trace_step` is one trace step. A figure the engine did not print stays null, so a check that needs it says so
instead of guessing. `fatal_message(plan, text)` is the first `fatal` match, or None.

Every regex runs on lines cut to `bounded_regex.MAX_LINE_CHARS` (the observation's glue says when
one was cut) within one time budget per output (`bounded_regex.Matcher`): a regex that runs past it
raises ValueError naming it, which the caller turns into an `error` observation.
"""

from __future__ import annotations

import re
from typing import Any

from conformance.documents import observation
from conformance.engines.engine_file import BYTE_UNITS, TOKEN_UNITS, FieldRule, LogPlan
from conformance.harness.bounded_regex import Matcher, clip_lines


def _skeleton_memory() -> dict[str, Any]:
    return {"bound_bytes": None, "ledger_bytes": {"attention_kv": None, "recurrent_state": None, "draft_kv": None},
            "outside_bound": [], "max_concurrency": None,
            "per_sequence": {"attention_kv_bytes": None, "recurrent_state_bytes": None, "draft_kv_bytes": None,
                             "state_slots": None},
            "pool": {"num_blocks": None, "block_size_tokens": None, "page_size_bytes": None, "unified": None}}


_QUANTITY = re.compile(r"^(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?\s*([A-Za-z]*)$")


def quantity(text: str, unit: str) -> int:
    """`160.312 MiB`, `1,344,798,720 B`, `2 GiB`, `1.5 GB` as bytes (`unit: bytes`; a bare number is
    bytes), `8,192 tokens` or `8,192` as tokens (`unit: tokens`); rounded to an integer, so a figure
    printed to 3 decimals of a MiB is as exact as what was printed."""
    units = BYTE_UNITS if unit == "bytes" else TOKEN_UNITS
    m = _QUANTITY.match(text.strip())
    if not m or (m.group(3) or ("B" if unit == "bytes" else "")) not in units:
        raise ValueError(f"{text!r} is not a quantity in {unit} (a number with optional thousands separators and "
                         f"one of {', '.join(u or '(none)' for u in units)})")
    number = float(m.group(1).replace(",", "") + (m.group(2) or ""))
    return int(round(number * units[m.group(3) or ("B" if unit == "bytes" else "")]))


def convert(text: str, rule: FieldRule) -> Any:
    """A captured group as the rule's type: mapped first, then a number (thousands separators dropped,
    scaled and rounded to an integer for `int`), a bool, or the text."""
    text = text.strip()
    if rule.unit is not None:
        return quantity(text, rule.unit)
    if rule.map is not None:
        if text not in rule.map:
            raise ValueError(f"{text!r} is not one of {sorted(rule.map)}")
        return rule.map[text]
    if rule.type == "str":
        return text
    if rule.type == "bool":
        low = text.lower()
        if low in ("true", "yes", "on", "1"):
            return True
        if low in ("false", "no", "off", "0"):
            return False
        raise ValueError(f"{text!r} is not a boolean")
    number = float(text.replace(",", ""))
    if rule.scale is not None:
        number *= rule.scale
    if rule.type == "float":
        return number
    if rule.type == "int" or number.is_integer():
        return int(round(number))
    return number


def _set(doc: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = doc
    for p in parts[:-1]:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    node[parts[-1]] = value


def _get_list(doc: dict[str, Any], dotted: str) -> list[Any]:
    parts = dotted.split(".")
    node = doc
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    if not isinstance(node.get(parts[-1]), list):
        node[parts[-1]] = []
    return node[parts[-1]]


def fatal_message(plan: LogPlan, text: str, matcher: Matcher | None = None) -> str | None:
    """The first `fatal` match's group; raises ValueError (`RegexBudgetError`) past the time budget."""
    if not plan.fatal:
        return None
    m = (matcher or Matcher()).search(plan.fatal, clip_lines(text)[0], "plan.log.fatal", multiline=True)
    return m.group(1).strip() if m else None


def build_observation(plan: LogPlan, text: str, case: dict[str, Any], engine: str, version: str,
                      matcher: Matcher | None = None) -> dict[str, Any]:
    matcher = matcher or Matcher()
    text, clipped = clip_lines(text)
    obs = observation.new(case["id"], engine, version, "plan", case["device"])
    obs["budget"] = {k: None for k in observation.BUDGET_FIELDS}
    obs["memory"] = _skeleton_memory()
    unparsed: list[str] = []
    for dotted, rule in plan.fields.items():
        m = matcher.search(rule.regex, text, f"plan.log.fields.{dotted}", multiline=True)
        if not m:
            unparsed.append(dotted)
            continue
        try:
            _set(obs, dotted, convert(m.group(1), rule))
        except ValueError as exc:
            raise ValueError(f"plan.log.fields.{dotted}: the engine printed {m.group(0)!r}: {exc}") from None
    if plan.message:
        m = re.search(plan.message, text, re.MULTILINE)
        if m:
            obs["message"] = m.group(1).strip()
        else:
            unparsed.append("message")
    lines = text.splitlines()
    for i, (dotted, value, regex) in enumerate(plan.lists):
        if any(matcher.search(regex, line, f"plan.log.lists[{i}].regex") for line in lines):
            target = _get_list(obs, dotted)
            if value not in target:
                target.append(value)
    if plan.trace_step:
        steps = [{g: int(m.group(g).replace(",", "")) for g in observation.STEP_FIELDS}
                 for m in (matcher.search(plan.trace_step, line, "plan.log.trace_step") for line in lines) if m]
        obs["trace"] = {"steps": steps} if steps else None
    obs["provenance"]["glue"] = [{
        "name": "conformance.harness.plan_log.build_observation",
        "description": "observation fields parsed from the engine's dry-run lines by its engine file's regexes; "
                       + (f"not printed (null): {', '.join(unparsed)}" if unparsed else "every field was printed")
                       + (f"; {clipped}" if clipped else "")}]
    obs["provenance"]["mapping"] = {dotted: rule.regex for dotted, rule in plan.fields.items()}
    return obs
