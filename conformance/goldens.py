"""Goldens: each oracle's observation per (suite, case, engine), recorded with syrupy.

Layout: `goldens/<suite>/<test module>/<test>[<engine>-<case>].json`, one JSON document each:

    {"golden_format": 1, "schema_version": "1", "case_id": ..., "engine": {name, version},
     "device_profile": "h200", "status": ..., "message": ..., "provenance": {...},
     <the sections the suite checks>: ...}

Contract:
- A golden is written only by `pytest --snapshot-update` (syrupy's own flag); a normal run
  never writes one, and a missing golden fails the test.
- A golden file without `golden_format` (or with another one) raises `GoldenFormatError`
  (`check_golden` fails the test with its message, no traceback).
- Under `--snapshot-update`, every rewritten golden's moved fields are listed by dotted path
  in the "golden updates" terminal summary (see `describe_moves`).
- `check_golden` compares the live observation's view with the golden: another engine version
  or device profile fails with a message saying so; otherwise every differing field is listed
  by its dotted JSON path before syrupy's own line diff.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from conformance import paths
from conformance.diff import format_differences, json_diff
from conformance.errors import ConformanceError
from conformance.observation import strip_volatile

GOLDEN_FORMAT = 1
HEADER_FIELDS = ("schema_version", "case_id", "status", "message")


class GoldenFormatError(ConformanceError):
    pass


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
    view["provenance"] = {k: prov.get(k) for k in ("functions", "overrides", "glue", "mapping") if k in prov}
    for s in sections:
        view[s] = obs.get(s)
    return view


def dumps(view: dict[str, Any]) -> str:
    return json.dumps(view, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


class GoldenExtension(JSONSnapshotExtension):
    """syrupy extension: goldens under the repo's `goldens/<suite>/`, serialized as sorted JSON."""

    @classmethod
    def dirname(cls, *, test_location) -> str:
        test_file = Path(test_location.filepath)
        suite = test_file.parent.name
        return str(paths.goldens_dir() / suite / test_location.basename)

    def serialize(self, data, *, exclude=None, include=None, matcher=None) -> str:
        if not isinstance(data, dict) or data.get("golden_format") != GOLDEN_FORMAT:
            raise GoldenFormatError("goldens are recorded from golden_view(...) documents only")
        return dumps(data)

    def read_snapshot_data_from_location(self, *, snapshot_location: str, snapshot_name: str, session_id: str):
        text = super().read_snapshot_data_from_location(
            snapshot_location=snapshot_location, snapshot_name=snapshot_name, session_id=session_id)
        if text is None:
            return None
        read_golden_text(text, snapshot_location)
        return text


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


def golden_path(snapshot) -> Path:
    """Where syrupy keeps this test's golden (the test's parametrization id names it)."""
    return Path(snapshot.extension.get_location(test_location=snapshot.test_location, index=snapshot.index))


def check_golden(snapshot, view: dict[str, Any]) -> None:
    """Assert `view` equals the test's golden; see the module contract."""
    updating = bool(snapshot.session.update_snapshots)
    path = golden_path(snapshot)
    if updating:
        _report_moves(snapshot, path, view)
        _drop_if_unreadable(path)
    else:
        if not path.is_file():
            pytest.fail(f"no golden at {path}: record the oracle's goldens with --snapshot-update "
                        f"(a normal run never writes one)", pytrace=False)
        try:
            golden = read_golden_text(path.read_text(), str(path))
        except GoldenFormatError as exc:
            pytest.fail(str(exc), pytrace=False)
        _check_identity(golden, view, path)
        diffs = json_diff(golden, view)
        if diffs:
            pytest.fail(format_differences(
                f"{view['engine']['name']} on {view['case_id']} differs from its golden {path}"
                f" ({len(diffs)} field(s)); if upstream moved on purpose, re-record with --snapshot-update:",
                diffs[:40]), pytrace=False)
    assert snapshot == view


UPDATE_PROPERTY = "golden_update"


def describe_moves(path: Path, old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """What an update changes in one golden, one dotted path per line; None when nothing moved."""
    diffs = json_diff(old, new)
    if not diffs:
        return None
    lines = [f"{path}: {len(diffs)} field(s) moved:"]
    for d in diffs:
        was = "(absent)" if d.why == "not in expected" else repr(d.expected)
        now = "(absent)" if d.why == "missing" else repr(d.actual)
        lines.append(f"  {d.path}: {was} -> {now}")
    return "\n".join(lines)


def _report_moves(snapshot, path: Path, view: dict[str, Any]) -> None:
    """Under --snapshot-update, tell what the rewrite of an existing golden changes (printed by
    the plugin's terminal summary from the test report's user_properties)."""
    if not path.is_file():
        return
    try:
        old = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        old = {"(unreadable golden)": True}
    moved = describe_moves(path, old if isinstance(old, dict) else {"(root)": old}, view)
    if moved:
        print(moved)
        snapshot.test_location.item.user_properties.append((UPDATE_PROPERTY, moved))


def _drop_if_unreadable(path: Path) -> None:
    """Under --snapshot-update, a golden of no (or another) golden_format is replaced, not read:
    syrupy reads the old file before it writes, and the extension refuses to read such a file."""
    if not path.is_file():
        return
    try:
        read_golden_text(path.read_text(), str(path))
    except GoldenFormatError:
        path.unlink()


def _check_identity(golden: dict[str, Any], view: dict[str, Any], path: Path) -> None:
    ge, ve = golden.get("engine", {}), view["engine"]
    if ge.get("version") != ve.get("version"):
        pytest.fail(f"{path}: golden recorded with {ge.get('name')} {ge.get('version')}, but the live oracle is "
                    f"{ve.get('name')} {ve.get('version')}: the comparison is meaningless until the golden is "
                    f"re-recorded for this version (--snapshot-update) or the pin is restored", pytrace=False)
    if golden.get("device_profile") != view.get("device_profile"):
        pytest.fail(f"{path}: golden recorded on device profile {golden.get('device_profile')!r}, live is "
                    f"{view.get('device_profile')!r}", pytrace=False)
    if golden.get("schema_version") != view.get("schema_version"):
        pytest.fail(f"{path}: golden has observation schema {golden.get('schema_version')!r}, live has "
                    f"{view.get('schema_version')!r}: re-record with --snapshot-update", pytrace=False)


def find_golden(suite: str, engine: str, case_id: str) -> dict[str, Any]:
    """The recorded golden of `engine` on `case_id` in `suite` (to compare another engine with it).

    Raises `GoldenFormatError` naming what is missing: a parity check must never pass for want of
    a golden."""
    root = paths.goldens_dir() / suite
    hits = sorted(p for p in root.glob("*/*.json") if p.stem.endswith(f"[{engine}-{case_id}]"))
    if not hits:
        raise GoldenFormatError(f"no {engine} golden for case {case_id!r} under {root}: record the oracle's goldens "
                                f"with `pytest suites/{suite} --engines {engine} --snapshot-update`")
    if len(hits) > 1:
        raise GoldenFormatError(f"several {engine} goldens for {case_id!r} under {root}: {', '.join(map(str, hits))}")
    return read_golden_text(hits[0].read_text(), str(hits[0]))
