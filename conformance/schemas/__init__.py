"""JSON schemas of the framework's two documents: cases and observations."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import jsonschema

SCHEMAS_DIR = Path(__file__).resolve().parent


@lru_cache(maxsize=None)
def load_schema(name: str) -> dict:
    """`name` is 'case' or 'observation'. Pure function of the shipped file (cached)."""
    return json.loads((SCHEMAS_DIR / f"{name}.schema.json").read_text())


def validator(name: str) -> jsonschema.protocols.Validator:
    schema = load_schema(name)
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


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
    """Every schema violation of `document` as `source: json.path: message`, sorted by path."""
    errors = sorted(validator(name).iter_errors(document), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    return [f"{source}: {json_path(e)}: {_message(e)}" for e in errors]


def _message(error: jsonschema.ValidationError) -> str:
    if error.validator == "additionalProperties":
        return error.message.replace("Additional properties are not allowed", "unknown field(s)")
    if error.validator in ("minProperties", "maxProperties") and error.absolute_path and error.absolute_path[-1] == "memory":
        return "exactly one of kv_cache_bytes or gpu_memory_utilization is required"
    if error.validator == "not":
        return f"{error.instance!r} has fields that its mode does not take"
    return error.message
