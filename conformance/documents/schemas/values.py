"""Values no engine can mean, found before anything else reads a document.

JSON allows them and JSON Schema lets them through, but each one crashed a consumer: a lone
surrogate (`"\\ud800"`) cannot be written as UTF-8 (report, junit, console); an integer past 2^63
is no count of bytes or tokens any engine has (and overflows a float in a chart or a check); a
NaN or an infinity is no JSON number; a document nested past `MAX_NESTING` levels overflows the
recursion of whatever walks it next.

Contract: `value_problems(document)` returns `(json path, message)` for each such value, in
document order, at most `MAX_PROBLEMS` (the last one saying how many more), walking the document
with an explicit stack (never recursion: it must survive the documents it refuses). A container
deeper than `MAX_NESTING` is reported and not entered.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_NESTING = 64
INTEGER_LIMIT = 2 ** 63          # |n| >= this: past a signed 64-bit integer
MAX_PROBLEMS = 20
_MAX_KEY_CHARS = 60


def child_path(path: str, key: object) -> str:
    """`a.b` for identifier keys, `a["odd key"]` for any other (JSON-quoted, ASCII, long keys cut)."""
    if isinstance(key, str) and key.isidentifier() and len(key) <= _MAX_KEY_CHARS:
        return f"{path}.{key}" if path else key
    text = json.dumps(key) if isinstance(key, str) else repr(key)
    if len(text) > _MAX_KEY_CHARS:
        text = text[:_MAX_KEY_CHARS] + '..."'
    return f"{path or '(root)'}[{text}]"


def _surrogate_at(text: str) -> int | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def _scalar_problem(node: Any) -> str | None:
    if isinstance(node, str):
        at = _surrogate_at(node)
        if at is not None:
            return (f"a string with a lone surrogate (U+{ord(node[at]):04X} at character {at}): not text any engine "
                    f"can mean (it cannot be written as UTF-8)")
    elif isinstance(node, bool):
        return None
    elif isinstance(node, int):
        if not -INTEGER_LIMIT <= node < INTEGER_LIMIT:
            digits = int(node.bit_length() * math.log10(2)) + 1
            return f"an integer of about {digits} digits, past 2^63: no count any engine has"
    elif isinstance(node, float) and not math.isfinite(node):
        return f"{node} is not a finite number"
    return None


def value_problems(document: Any, max_nesting: int = MAX_NESTING) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    extra = 0

    def add(path: str, message: str) -> None:
        nonlocal extra
        if len(problems) < MAX_PROBLEMS - 1:
            problems.append((path, message))
        else:
            extra += 1

    stack: list[tuple[Any, str, int]] = [(document, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth >= max_nesting:
                add(path or "(root)", f"nested deeper than {max_nesting} levels")
                continue
            if isinstance(node, dict):
                children = []
                for k, v in node.items():
                    p = child_path(path, k)
                    if isinstance(k, str) and _surrogate_at(k) is not None:
                        add(p, "a key with a lone surrogate: not text any engine can mean")
                    children.append((v, p, depth + 1))
            else:
                children = [(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(node)]
            stack.extend(reversed(children))
            continue
        message = _scalar_problem(node)
        if message:
            add(path or "(root)", message)
    if extra == 1:
        problems.append(("(document)", "... and 1 more such value"))
    elif extra:
        problems.append(("(document)", f"... and {extra} more such values"))
    return problems
