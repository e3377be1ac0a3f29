"""Another checkout's paths, as this checkout's: a run directory judged where it was not measured.

Contract: `moves(meta)` reads a run's `run.json` provenance (`repo_root`, `cache_dir`: the checkout and
cache that measured it) and returns the (theirs, ours) pairs that differ, longest first;
`relocated(value, moves)` rewrites each string's occurrences of theirs as ours where theirs is a whole
path (followed by `/`, the end, or a character no path name continues with: `/ci/a` never rewrites
`/ci/ab`). A plan records the
model directories it read (provenance.mapping); a golden holds them as `<repo>` of the checkout that
judges it, so without this a run merged or verified on another host differs from every golden.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence


def moves(meta: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    from conformance import paths

    prov = (meta or {}).get("provenance") or {}
    pairs = [(prov.get("repo_root"), str(paths.REPO_ROOT)), (prov.get("cache_dir"), str(paths.cache_dir()))]
    return sorted(((a, b) for a, b in pairs if isinstance(a, str) and a and a != b), key=lambda m: -len(m[0]))


def relocated(value: Any, pairs: Sequence[tuple[str, str]]) -> Any:
    if not pairs:
        return value
    if isinstance(value, dict):
        return {k: relocated(v, pairs) for k, v in value.items()}
    if isinstance(value, list):
        return [relocated(v, pairs) for v in value]
    if isinstance(value, str):
        for theirs, ours in pairs:
            if theirs in value:
                value = re.sub(re.escape(theirs) + r"(?![\w.-])", lambda _: ours, value)
    return value
