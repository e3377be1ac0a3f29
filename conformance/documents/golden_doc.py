"""A golden document: what a suite records of an observation, and how a golden file is read.

Contract: `golden_view(obs, sections)` is the document recorded (header, provenance and the named
sections, local paths made portable); `read_golden_text(text, where)` returns a golden document
or raises `GoldenFormatError` naming the file and what is wrong with it.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from conformance import paths
from conformance.documents.observation import strip_volatile
from conformance.errors import ConformanceError

GOLDEN_FORMAT = 1
HEADER_FIELDS = ("schema_version", "case_id", "status", "message")
# `assumed`: the figures an adapter planned with in place of a device measurement, each with its
# value and source (only observations that used one carry it).
PROVENANCE_FIELDS = ("functions", "overrides", "glue", "mapping", "assumed")


class GoldenFormatError(ConformanceError):
    """A golden that cannot be used: unreadable (not JSON, no golden_format, another format)."""


class GoldenMissingError(GoldenFormatError):
    """No golden recorded for (suite, engine, case): an absence, not a broken file."""


def portable(value: Any) -> Any:
    """`value` with this checkout's and the cache's absolute paths written as `<repo>` and
    `<cache>`, so a golden recorded in one clone compares equal in another."""
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v) for v in value]
    if isinstance(value, str):
        for root, name in ((str(paths.REPO_ROOT), "<repo>"), (str(paths.cache_dir()), "<cache>")):
            value = value.replace(root, name)
    return value


def golden_view(obs: dict[str, Any], sections: Iterable[str]) -> dict[str, Any]:
    """What a suite records: the header, provenance, and the named top-level sections, with local
    paths made portable."""
    obs = portable(strip_volatile(obs))
    view: dict[str, Any] = {"golden_format": GOLDEN_FORMAT}
    for f in HEADER_FIELDS:
        view[f] = obs.get(f)
    view["engine"] = obs["engine"]
    view["device_profile"] = obs["device"]["profile"]
    prov = obs.get("provenance", {})
    view["provenance"] = {k: prov.get(k) for k in PROVENANCE_FIELDS if k in prov}
    for s in sections:
        view[s] = obs.get(s)
    return view


def dumps(view: dict[str, Any]) -> str:
    return json.dumps(view, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def read_golden_text(text: str, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GoldenFormatError(f"{where}: golden is not valid JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(doc, dict) or "golden_format" not in doc:
        raise GoldenFormatError(f"{where}: golden has no golden_format field; re-record it with --snapshot-update")
    if doc["golden_format"] != GOLDEN_FORMAT:
        raise GoldenFormatError(
            f"{where}: golden_format {doc['golden_format']!r} is not this framework's {GOLDEN_FORMAT}")
    return doc
