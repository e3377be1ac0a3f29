"""Which cases a session plans: the one syntax of `--cases` in every face.

`--cases` (`conformance run`, `conformance plan`, `pytest suites/`) takes patterns, as separate
arguments or as a comma list (`--cases 'tag:seed,drafting-table-*'`), each one of:
    tag:NAME          every case tagged NAME
    a case file       a path ending .yaml or .yml, or any file that exists: that case
    a glob            over case ids (`drafting-table-*`, `seed-draft-kv-c8`)
The selected cases are the case files in the order given, then every case of the pool that a tag or
a glob matches, in the pool's order (by file name). The pool is the cases directory (`--cases-dir`,
default suites/cases); `live` selects from the live cases instead (suites/live/cases unless a directory
is given) and keeps only those with a `live:` section; `ANY_POOL` is both, a live case only where no
case of the cases directory has its id (what `conformance plan` may plan).

`DEFAULT_SELECTION` is `conformance run`'s default matrix: every case tagged `seed` (the three port
bugs) and the drafting table (`drafting-table-*`); `DEFAULT_LIVE_SELECTION` its live one (tag live);
`EVERY_CASE` the suites' default.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from conformance import paths
from conformance.documents.cases import Case, load_all, load_case
from conformance.errors import ConformanceError, UnknownCaseError

TAG = "tag:"
ANY_POOL = None   # `live` of select_cases: the cases directory and the live cases


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
EVERY_CASE = Selection(tags=(), id_globs=("*",))


def case_patterns(values: Iterable[str] | str | None) -> list[str]:
    """The patterns of `--cases` values: each value one pattern or a comma list of them."""
    if values is None:
        return []
    values = [values] if isinstance(values, str) else list(values)
    return [p.strip() for v in values for p in v.split(",") if p.strip()]


def _is_file(pattern: str) -> bool:
    return pattern.endswith((".yaml", ".yml")) or Path(pattern).is_file()


def _as_selection(patterns: Sequence[str]) -> Selection:
    return Selection(tags=tuple(p[len(TAG):] for p in patterns if p.startswith(TAG)),
                     id_globs=tuple(p for p in patterns if not p.startswith(TAG)))


def _pool(directory: Path | None, live: bool | None) -> list[Case]:
    if live is ANY_POOL:
        cases = load_all(directory)
        ids = {c.id for c in cases}
        return cases + ([c for c in load_all(paths.live_cases_dir()) if c.id not in ids] if directory is None else [])
    return load_all(paths.live_cases_dir() if live and directory is None else directory)


def select_cases(patterns: Iterable[str] | str | None, directory: Path | None = None, live: bool | None = False,
                 default: Selection = DEFAULT_SELECTION, required: bool = True) -> tuple[list[Case], str]:
    """The cases `patterns` select (see the module's docstring) and a one-line description of the selection.

    No pattern selects `default` (`DEFAULT_LIVE_SELECTION` when `live` and `default` is `DEFAULT_SELECTION`).
    `required`: a tag or glob that matches no case raises `UnknownCaseError` naming it, and an empty selection
    raises ConformanceError, each naming the known cases (a run that checks nothing must not pass; the suites
    select with `required=False`, a pattern meaning the live cases or the plan cases alone); a bad case file
    raises `CaseError` naming the file."""
    patterns = case_patterns(patterns)
    if live and default is DEFAULT_SELECTION:
        default = DEFAULT_LIVE_SELECTION
    if not patterns:
        cases = [c for c in _pool(directory, live) if default.matches(c)]
        described = f"default ({default.describe()})"
    else:
        files = [p for p in patterns if _is_file(p)]
        cases = [load_case(f) for f in files]
        wanted = _as_selection([p for p in patterns if p not in files])
        if wanted.tags or wanted.id_globs:
            pool, ids = _pool(directory, live), {c.id for c in cases}
            if required:
                _each_matches(wanted, pool)
            cases += [c for c in pool if wanted.matches(c) and c.id not in ids]
        described = " ".join(patterns)
    if live:
        cases = [c for c in cases if c.spec.get("live")]
        described += " (cases with a live section)"
    if required and not cases:   # every pattern matched, none with a live section
        known = ", ".join(c.id for c in _pool(directory, live))
        raise ConformanceError(f"--cases: no case matches {described} (known: {known})")
    return cases, described


def _each_matches(wanted: Selection, pool: Sequence[Case]) -> None:
    known = ", ".join(c.id for c in pool)
    for tag in wanted.tags:
        if not any(tag in (c.spec.get("tags") or ()) for c in pool):
            raise UnknownCaseError(f"--cases: unknown case tag {tag!r}: no case is tagged {tag} (known: {known})")
    for glob in wanted.id_globs:
        if not any(fnmatch.fnmatchcase(c.id, glob) for c in pool):
            raise UnknownCaseError(f"--cases: unknown case {glob!r}: no case matches {glob} (known: {known})")
