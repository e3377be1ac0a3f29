"""The case fuzzer's tally: what was tried, how each input was rejected, and every traceback.

One `FuzzTally` lives in the pytest config's stash for the session (no module state); the
reliability conftest prints it in the terminal summary.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

# Rejection kinds, by the first message pattern that matches a problem line (order matters).
REJECTION_KINDS: tuple[tuple[str, str], ...] = (
    ("not UTF-8", "not UTF-8 text"),
    ("duplicate key", "duplicate key"),
    ("not valid YAML", "invalid YAML"),
    ("must be a YAML mapping", "not a mapping"),
    ("not a finite number", "non-finite number"),
    ("unknown field", "unknown field"),
    ("is a required property", "missing field"),
    ("is not of type", "wrong type"),
    ("is less than the minimum", "below minimum"),
    ("is less than or equal to the minimum", "below minimum"),
    ("is greater than the maximum", "above maximum"),
    ("is not one of", "unknown enum value"),
    ("does not match", "bad id pattern"),
    ("is too long", "too long"),
    ("exactly one of", "memory bound"),
    ("does not take", "acceptance mode fields"),
    ("needs a draft model dir", "missing draft"),
    ("model dir", "model dir"),
    ("config.json", "model config"),
    ("not a usable path", "model path"),
    ("cannot read", "unreadable file"),
)


def rejection_kind(message: str) -> str:
    for pattern, kind in REJECTION_KINDS:
        if pattern in message:
            return kind
    return "other: " + re.sub(r"\s+", " ", message)[:60]


@dataclass
class FuzzTally:
    num_examples: int = 0
    num_accepted: int = 0
    num_cli_runs: int = 0
    inputs_by_kind: Counter = field(default_factory=Counter)
    rejections_by_kind: Counter = field(default_factory=Counter)
    tracebacks: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"examples tried: {self.num_examples} in-process load_case, {self.num_cli_runs} through the CLI",
               f"accepted as valid cases: {self.num_accepted}",
               f"rejected: {sum(self.rejections_by_kind.values())} problem lines, by kind:"]
        out += [f"  {n:6d}  {k}" for k, n in self.rejections_by_kind.most_common()]
        out.append("inputs by mutation kind:")
        out += [f"  {n:6d}  {k}" for k, n in self.inputs_by_kind.most_common()]
        out.append(f"tracebacks: {len(self.tracebacks)}")
        out += [f"  {t}" for t in self.tracebacks[:5]]
        return out
