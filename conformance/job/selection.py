"""Which cases and engines `conformance run` plans.

`DEFAULT_SELECTION` is the default matrix: every case tagged `seed` (the three port bugs) and the
drafting table (`drafting-table-*`), on every engine the framework knows.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from conformance.cases import Case, load_all, load_case, select
from conformance.errors import ConformanceError
from conformance.harness.engine_file import EngineFile
from conformance.harness.registry import resolve_engines


@dataclass(frozen=True)
class Selection:
    tags: tuple[str, ...]
    id_globs: tuple[str, ...]

    def matches(self, case: Case) -> bool:
        tags = set(case.spec.get("tags") or ())
        return bool(tags & set(self.tags)) or any(fnmatch.fnmatchcase(case.id, g) for g in self.id_globs)

    def describe(self) -> str:
        parts = [f"tag {t}" for t in self.tags] + list(self.id_globs)
        return " + ".join(parts)


DEFAULT_SELECTION = Selection(tags=("seed",), id_globs=("drafting-table-*",))
DEFAULT_LIVE_SELECTION = Selection(tags=("live",), id_globs=())


def select_cases(patterns: Sequence[str] | None, directory: Path | None = None,
                 live: bool = False) -> tuple[list[Case], str]:
    """The cases to plan (`live`: to serve) and a one-line description of the selection.

    `patterns`: globs over case ids, or paths to case files; none means `DEFAULT_SELECTION`
    (`DEFAULT_LIVE_SELECTION` when live). Live runs keep only cases with a `live:` section.
    Raises ConformanceError when the selection is empty (a run that checks nothing must not pass)."""
    default = DEFAULT_LIVE_SELECTION if live else DEFAULT_SELECTION
    if live and directory is None:
        from conformance import paths

        directory = paths.live_cases_dir()
    if not patterns:
        cases = [c for c in load_all(directory) if default.matches(c)]
        described = f"default ({default.describe()})"
    else:
        files = [p for p in patterns if p.endswith((".yaml", ".yml")) and Path(p).is_file()]
        globs = [p for p in patterns if p not in files]
        cases = [load_case(f) for f in files]
        if globs:
            cases += [c for c in select(load_all(directory), globs) if c.id not in {x.id for x in cases}]
        described = " ".join(patterns)
    if live:
        cases = [c for c in cases if c.spec.get("live")]
        described += " (cases with a live section)"
    if not cases:
        known = ", ".join(c.id for c in load_all(directory))
        raise ConformanceError(f"--cases: no case matches {described} (known: {known})")
    return cases, described


def select_engines(refs: str | None) -> list[EngineFile]:
    """A comma list of engine names or engine files (default: every known engine, the reference first)."""
    return resolve_engines(refs)
