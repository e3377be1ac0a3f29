"""Engine-file regexes over engine output, with bounded work in the framework's process.

An engine file's regexes (`plan.log` fields, lists, trace steps, `fatal`; a live manifest's
`startup_regexes`) meet whatever the engine printed. Two bounds keep that finite:

- `clip_lines(text)`: every line longer than `MAX_LINE_CHARS` is cut there before any regex sees
  it; the note returned says how many lines were cut (None when none was);
- `Matcher(budget_s)`: every search runs on the `regex` engine with what is left of one time
  budget for the whole output; past it, `RegexBudgetError` (a ValueError) names the regex and the
  budget. The patterns keep Python `re` syntax (`regex`'s VERSION0 is compatible with it).
"""

from __future__ import annotations

import time
from typing import Any

import regex

MAX_LINE_CHARS = 4096
REGEX_BUDGET_S = 5.0


class RegexBudgetError(ValueError):
    pass


def clip_lines(text: str, max_chars: int = MAX_LINE_CHARS) -> tuple[str, str | None]:
    """`text` with each line cut to `max_chars`, and a note when any was cut."""
    lines = text.split("\n")
    long = [i for i, line in enumerate(lines) if len(line) > max_chars]
    if not long:
        return text, None
    longest = max(len(lines[i]) for i in long)
    for i in long:
        lines[i] = lines[i][:max_chars]
    return "\n".join(lines), (f"{len(long)} output line(s) longer than {max_chars} characters (the longest "
                              f"{longest}) were cut to {max_chars} before the engine file's regexes read them")


class Matcher:
    """Searches sharing one time budget (`budget_s` for all of them together)."""

    def __init__(self, budget_s: float = REGEX_BUDGET_S):
        self.budget_s = budget_s
        self._deadline = time.monotonic() + budget_s

    def search(self, pattern: str, text: str, where: str, multiline: bool = False) -> Any:
        left = self._deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            return regex.search(pattern, text, regex.MULTILINE if multiline else 0, timeout=left)
        except TimeoutError:
            raise RegexBudgetError(f"{where}: the regex {pattern!r} did not finish within the {self.budget_s:g} s "
                                   f"the framework gives the engine file's regexes on one output (stopped; a "
                                   f"pattern that backtracks this much needs rewriting)") from None
