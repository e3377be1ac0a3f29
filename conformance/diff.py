"""Parity rules: path-level differences between observations, and the tolerances per field.

Contract: `json_diff(expected, actual)` lists every differing leaf as a `Difference` with its
dotted JSON path; `compare(expected, actual, rules)` applies `Rule`s (exact, or a relative /
absolute tolerance, or `at_least` for seats) and returns the failures. The verdicts built on
them live in `conformance.verdicts`; which check judges which engine, in `conformance.check_table`.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass
from typing import Any, Iterable


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


@dataclass(frozen=True)
class Rule:
    """How one field (a glob over dotted paths) is compared.

    kind: "exact" | "tolerance" (|a - e| <= max(abs_tol, rel_tol * |e|)) | "at_least" (a >= e)
    | "at_most" (a <= e).
    """

    pattern: str
    kind: str = "exact"
    rel_tol: float = 0.0
    abs_tol: float = 0.0
    reason: str = ""

    def check(self, d: Difference) -> Difference | None:
        e, a = d.expected, d.actual
        if self.kind == "exact" or not (_is_num(e) and _is_num(a)):
            return d
        if self.kind == "tolerance":
            if math.isclose(a, e, rel_tol=self.rel_tol, abs_tol=self.abs_tol):
                return None
            return Difference(d.path, e, a, f"outside tolerance rel {self.rel_tol} abs {self.abs_tol}")
        if self.kind == "at_least":
            return None if a >= e else Difference(d.path, e, a, "below the expected minimum")
        if self.kind == "at_most":
            return None if a <= e else Difference(d.path, e, a, "above the expected maximum")
        raise ValueError(f"unknown rule kind {self.kind!r}")


def select_paths(diffs: Iterable[Difference], patterns: Iterable[str]) -> list[Difference]:
    pats = list(patterns)
    return [d for d in diffs if any(fnmatch.fnmatchcase(d.path, p) for p in pats)]


def compare(expected: dict[str, Any], actual: dict[str, Any], rules: Iterable[Rule],
            fields: Iterable[str]) -> list[Difference]:
    """Differences on `fields` (globs) that the first matching rule does not forgive (default exact)."""
    rules = list(rules)
    failures = []
    for d in select_paths(json_diff(expected, actual), fields):
        rule = next((r for r in rules if fnmatch.fnmatchcase(d.path, r.pattern)), Rule(d.path))
        bad = rule.check(d)
        if bad is not None:
            failures.append(bad)
    return failures


def format_differences(title: str, diffs: Iterable[Difference]) -> str:
    lines = [title] + [f"  {d}" for d in diffs]
    return "\n".join(lines)
