"""Differences between two JSON documents, leaf by leaf.

Contract: `json_diff(expected, actual)` lists every differing leaf as a `Difference` with its
dotted JSON path (`memory.pool.num_blocks`, `trace.steps[3].num_preempted`, `x.length` where two
lists differ in length), depth first, keys sorted. A golden's comparison (`checks.golden`,
`goldens`) and the budget's (`checks.budget`) are built on it; each check's own tolerances are
the check's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Difference:
    path: str
    expected: Any
    actual: Any
    why: str = "differs"

    def __str__(self) -> str:
        return f"{self.path}: expected {_short(self.expected)}, got {_short(self.actual)} ({self.why})"


def _short(v: Any, limit: int = 120) -> str:
    s = repr(v)
    return s if len(s) <= limit else s[: limit - 3] + "..."


_MISSING = object()


def json_diff(expected: Any, actual: Any, path: str = "") -> list[Difference]:
    """Every leaf where `actual` differs from `expected`, depth first, keys sorted."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out: list[Difference] = []
        for key in sorted(set(expected) | set(actual)):
            sub = f"{path}.{key}" if path else str(key)
            e, a = expected.get(key, _MISSING), actual.get(key, _MISSING)
            if e is _MISSING:
                out.append(Difference(sub, None, a, "not in expected"))
            elif a is _MISSING:
                out.append(Difference(sub, e, None, "missing"))
            else:
                out += json_diff(e, a, sub)
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        out = []
        if len(expected) != len(actual):
            out.append(Difference(f"{path}.length" if path else "length", len(expected), len(actual), "lengths differ"))
        for i, (e, a) in enumerate(zip(expected, actual)):
            out += json_diff(e, a, f"{path}[{i}]")
        return out
    if type(expected) is not type(actual) and not (_is_num(expected) and _is_num(actual)):
        return [Difference(path or "(root)", expected, actual, "types differ")]
    if expected != actual:
        return [Difference(path or "(root)", expected, actual)]
    return []


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
