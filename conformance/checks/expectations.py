"""Expectations: an engine's known failures, so a team can gate its CI on this framework.

A file (YAML, schema `conformance/documents/schemas/expectations.schema.json`), one per engine under test:

    engine: my-port                       # the default engine of every entry (optional)
    expectations:
      - check: memory.inside_bound        # a check of conformance/checks/check_table.py, or a glob (`trace.*`)
        case: "seed-draft-kv-*"           # a case id or glob (optional: every case)
        reason: draft KV is allocated beside the pool
        link: https://tracker.example/PORT-12

Contract:
- `load_expectations(paths)` returns every entry of every file, or raises `ExpectationsError` with one
  line per problem, each `file: json.path: message` (a bad file, a schema violation, a `check` that
  names no check of the check table).
- `classify(verdicts, entries)` sorts a run's verdicts, as WPT's and Vulkan CTS's expectations do:
  a failed verdict an entry matches is an expected failure; a failed one no entry matches is a new
  failure; a passing verdict an entry matches is an unexpected pass (the bug is fixed: remove the
  entry); skipped verdicts are none of these. Entries that matched no verdict are listed as unused.
  A failed check of an oracle other than its golden is a finding about the oracle
  (`report.model.is_finding`), listed apart, never a new failure. A run fails only on new failures
  and unexpected passes.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from conformance.checks.verdicts import FAIL, PASS, Verdict
from conformance.errors import ConformanceError


class ExpectationsError(ConformanceError):
    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class Expectation:
    """One known failure: `check`, `case` and `engine` are names or globs (`engine` None: every engine)."""

    check: str
    case: str
    engine: str | None
    reason: str
    link: str
    source: str                      # `file: expectations[i]`, to say which entry to remove

    def matches(self, check: str, engine: str, case_id: str) -> bool:
        return (fnmatch.fnmatchcase(check, self.check) and fnmatch.fnmatchcase(case_id, self.case)
                and (self.engine is None or fnmatch.fnmatchcase(engine, self.engine)))

    def describe(self) -> str:
        return f"{self.reason} ({self.link}; {self.source})"

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "case": self.case, "engine": self.engine, "reason": self.reason,
                "link": self.link, "source": self.source}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "Expectation":
        return cls(doc["check"], doc.get("case", "*"), doc.get("engine"), doc["reason"], doc["link"],
                   doc.get("source", ""))


def _check_names() -> list[str]:
    from conformance.checks.check_table import CHECKS, LIVE_CHECKS

    return [c.name for c in (*CHECKS, *LIVE_CHECKS)]


def parse_expectations(doc: Any, source: str) -> list[Expectation]:
    """Validate a parsed document read from `source`; `ExpectationsError` names each problem's JSON path."""
    from conformance.documents.schemas import error_lines

    if not isinstance(doc, dict):
        raise ExpectationsError([f"{source}: (root): an expectations file is a YAML mapping with `expectations:`, "
                                 f"got {'nothing' if doc is None else type(doc).__name__}"])
    problems = error_lines("expectations", doc, source)
    if problems:
        raise ExpectationsError(problems)
    names = _check_names()
    out = []
    for i, entry in enumerate(doc["expectations"]):
        if not fnmatch.filter(names, entry["check"]):
            problems.append(f"{source}: expectations[{i}].check: {entry['check']!r} names no check "
                            f"(known: {', '.join(names)})")
            continue
        out.append(Expectation(entry["check"], entry.get("case", "*"), entry.get("engine", doc.get("engine")),
                               " ".join(entry["reason"].split()), entry["link"], f"{source}: expectations[{i}]"))
    if problems:
        raise ExpectationsError(problems)
    return out


def load_expectations(paths: Iterable[Path | str]) -> tuple[Expectation, ...]:
    from conformance.documents.yaml_file import YamlFileError, read_yaml

    out: list[Expectation] = []
    problems: list[str] = []
    for path in paths:
        try:
            out += parse_expectations(read_yaml(Path(path), "expectations file"), str(path))
        except (YamlFileError, ExpectationsError) as exc:
            problems += exc.problems
    if problems:
        raise ExpectationsError(problems)
    return tuple(out)


def find(entries: Sequence[Expectation], check: str, engine: str, case_id: str) -> Expectation | None:
    """The first entry that marks (check, engine, case) as a known failure."""
    return next((e for e in entries if e.matches(check, engine, case_id)), None)


@dataclass(frozen=True)
class Classified:
    expected_failures: tuple[tuple[Verdict, Expectation], ...] = ()
    unexpected_passes: tuple[tuple[Verdict, Expectation], ...] = ()
    new_failures: tuple[Verdict, ...] = ()
    unused: tuple[Expectation, ...] = field(default=())
    findings: tuple[Verdict, ...] = ()       # oracles' failed checks (not their goldens): facts, not failures

    @property
    def gate_fails(self) -> bool:
        """What fails a CI gate: a new failure or an unexpected pass."""
        return bool(self.new_failures or self.unexpected_passes)


def classify(verdicts: Iterable[Verdict], entries: Sequence[Expectation],
             oracles: frozenset[str] | set[str] = frozenset()) -> Classified:
    """`oracles`: the run's oracle engines, whose failed checks (not goldens) are findings."""
    expected, unexpected, new, findings = [], [], [], []
    used: set[int] = set()
    for v in verdicts:
        if v.failed and v.engine in oracles and not v.check.endswith(".golden"):
            findings.append(v)
            continue
        entry = find(entries, v.check, v.engine, v.case_id)
        if entry is not None and v.outcome in (FAIL, PASS):
            used.add(id(entry))
        if v.outcome == FAIL:
            (expected.append((v, entry)) if entry is not None else new.append(v))
        elif v.outcome == PASS and entry is not None:
            unexpected.append((v, entry))
    return Classified(tuple(expected), tuple(unexpected), tuple(new), tuple(e for e in entries if id(e) not in used),
                      tuple(findings))
