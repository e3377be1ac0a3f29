"""JSON schemas of the framework's documents: cases, observations, engine files, live manifests and
model shapes (a model directory's config.json).

In the documents a user writes (`USER_DOCUMENTS`), `"type": "integer"` means an integer: jsonschema
(draft 6 on) also takes a float with an integral value (`2048.0`), which engines then read as a
float, plan differently or crash on. Observations keep the standard rule (adapters' JSON).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

import jsonschema

SCHEMAS_DIR = Path(__file__).resolve().parent


@lru_cache(maxsize=None)
def load_schema(name: str) -> dict:
    """`name` is 'case', 'observation', 'engine', 'manifest', 'shape' or 'expectations'. Pure function of the shipped file (cached)."""
    return json.loads((SCHEMAS_DIR / f"{name}.schema.json").read_text())


USER_DOCUMENTS = frozenset({"case", "engine", "manifest", "shape", "expectations"})


def _is_strict_integer(_checker, instance) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


def validator(name: str) -> jsonschema.protocols.Validator:
    schema = load_schema(name)
    cls = jsonschema.validators.validator_for(schema)
    if name in USER_DOCUMENTS:
        checker = cls.TYPE_CHECKER.redefine("integer", _is_strict_integer)
        cls = jsonschema.validators.extend(cls, type_checker=checker)
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
    """Every schema violation of `document` as `source: json.path: message`, sorted by path.

    NaN and infinities are refused wherever they appear: JSON has no such numbers, and jsonschema
    lets NaN through every `minimum`/`maximum` (each comparison with NaN is false)."""
    errors = sorted(validator(name).iter_errors(document), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    lines = [f"{source}: {json_path(e)}: {_message(e)}" for e in errors]
    return lines + [f"{source}: {p}: {v} is not a finite number" for p, v in _non_finite(document, "")]


def _non_finite(node: object, path: str) -> list[tuple[str, float]]:
    if isinstance(node, float):
        return [] if math.isfinite(node) else [(path or "(root)", node)]
    if isinstance(node, dict):
        return [hit for k, v in node.items() for hit in _non_finite(v, _child_path(path, k))]
    if isinstance(node, list):
        return [hit for i, v in enumerate(node) for hit in _non_finite(v, f"{path}[{i}]")]
    return []


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


def _child_path(path: str, key: object) -> str:
    """`a.b` for identifier keys, `a["odd key"]` for any other (JSON-quoted)."""
    if isinstance(key, str) and key.isidentifier():
        return f"{path}.{key}" if path else key
    return f"{path or '(root)'}[{json.dumps(key) if isinstance(key, str) else repr(key)}]"
