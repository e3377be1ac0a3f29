"""JSON schemas of the framework's documents: cases, observations, engine files, live manifests and
model shapes (a model directory's config.json).

In every document, `"type": "integer"` means an integer: jsonschema (draft 6 on) also takes a float
with an integral value (`2048.0`), which engines then read as a float, plan differently or crash
on, and which crashed the framework's own checks and report when an engine wrote one in an
observation (a trace step of `301.0`).

Before the schema, every document is walked for values no engine can mean (`schemas.values`: lone
surrogates, integers past 2^63, NaN and infinities, nesting past a limit); such a value is a
problem naming its JSON path, and a document nested too deep is not given to jsonschema at all.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import jsonschema

from conformance.documents.schemas.values import value_problems

SCHEMAS_DIR = Path(__file__).resolve().parent


@lru_cache(maxsize=None)
def load_schema(name: str) -> dict:
    """`name` is 'case', 'observation', 'engine', 'manifest', 'shape' or 'expectations'. Pure function of the
    shipped file (cached), with the case's `device` enum filled from the device profiles
    (`conformance.documents.devices.PROFILES`): the names are written once, there."""
    schema = json.loads((SCHEMAS_DIR / f"{name}.schema.json").read_text())
    if name == "case":
        from conformance.documents.devices import PROFILES

        schema["properties"]["device"]["enum"] = list(PROFILES)
    return schema


USER_DOCUMENTS = frozenset({"case", "engine", "manifest", "shape", "expectations"})


def _is_strict_integer(_checker, instance) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


def validator(name: str) -> jsonschema.protocols.Validator:
    schema = load_schema(name)
    cls = jsonschema.validators.validator_for(schema)
    checker = cls.TYPE_CHECKER.redefine("integer", _is_strict_integer)
    return jsonschema.validators.extend(cls, type_checker=checker)(schema)


def json_path(error: jsonschema.ValidationError) -> str:
    """`speculative.num_speculative_tokens`, `acceptance_rates[2]`, or `(root)`."""
    parts: list[str] = []
    for p in error.absolute_path:
        if isinstance(p, int):
            parts.append(f"[{p}]")
        else:
            parts.append(("." if parts else "") + str(p))
    return "".join(parts) or "(root)"


def error_lines(name: str, document: object, source: str) -> list[str]:
    """Every problem of `document` as `source: json.path: message`: first the values no engine can
    mean (`schemas.values`; NaN and infinities among them: JSON has no such numbers, and jsonschema
    lets NaN through every `minimum`/`maximum`), then every schema violation, sorted by path. Where
    the first are found the schema is not checked: its messages would repeat those values whole."""
    lines = [f"{source}: {p}: {m}" for p, m in value_problems(document)]
    if lines:
        return lines
    errors = sorted(validator(name).iter_errors(document), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    return [f"{source}: {json_path(e)}: {_message(e)}" for e in errors]


def _message(error: jsonschema.ValidationError) -> str:
    if error.validator == "additionalProperties":
        return error.message.replace("Additional properties are not allowed", "unknown field(s)")
    if error.validator in ("minProperties", "maxProperties") and error.absolute_path and error.absolute_path[-1] == "memory":
        return "exactly one of kv_cache_bytes or gpu_memory_utilization is required"
    if error.validator == "oneOf" and error.absolute_path and error.absolute_path[-1] == "acceptance":
        return "synthetic acceptance takes exactly one of mean_acceptance_length or acceptance_rates"
    if error.validator == "pattern" and error.absolute_path and error.absolute_path[-1] == "link":
        return f"{error.instance!r} is not a link: give an http(s) URL or a tracker key such as PORT-12"
    if error.validator == "pattern" and error.absolute_path and error.absolute_path[-1] == "reason":
        return "a reason must say why (it is empty)"
    if error.validator == "not":
        return f"{error.instance!r} has fields that its mode does not take"
    return error.message


