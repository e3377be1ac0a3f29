"""The check table's row type and the one input every check takes.

Contract: a `CheckSpec` says which role of engine a check judges (`judges`), on which cases
(`case_globs`), against which oracle's document (`against`), with which second case of the same
engine (`partner`), which observation fields it reads (`reads`, docs/observation.md) and when it
fails, in words (`fails_when`: the README tables are generated from it). `run` takes a
`CheckInput` and returns one `Verdict`. Nothing here selects an engine by its own name.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any, Callable

from conformance.checks.verdicts import Verdict
from conformance.engines.roles import BOTH, ORACLE, UNDER_TEST

__all__ = ["BOTH", "ORACLE", "UNDER_TEST", "CheckInput", "CheckSpec"]


@dataclass(frozen=True)
class CheckInput:
    obs: dict[str, Any]                      # the judged engine's observation
    case_spec: dict[str, Any]                # the case (its `id` included)
    other: dict[str, Any] | None = None      # the oracle's document (golden or live), None if none
    source: str = ""                         # where `other` came from
    partner: dict[str, Any] | None = None    # the same engine's observation of the partner case
    is_oracle: bool = False                  # the judged engine's role is oracle


@dataclass(frozen=True)
class CheckSpec:
    name: str
    suite: str
    judges: tuple[str, ...]                  # roles this check judges
    run: Callable[[CheckInput], Verdict]
    fails_when: str = ""                     # when it fails, in words (the README tables)
    against: str | None = None               # the oracle whose document it compares with
    needs_against: bool = True               # False: runs with other=None when the oracle has no document
    case_globs: tuple[str, ...] = ("*",)
    partner: str | None = None               # a second case of the same engine (a cross-case check)
    golden: bool = False                     # the suite's own-golden check (run through syrupy in pytest)
    reads: tuple[str, ...] = ()              # the observation fields it reads (docs/observation.md)

    def applies(self, role: str, case_id: str) -> bool:
        return role in self.judges and any(fnmatch.fnmatchcase(case_id, g) for g in self.case_globs)
