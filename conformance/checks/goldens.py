"""Goldens: each engine's observation per (suite, case, engine), recorded with syrupy.

Layout: `goldens/<suite>/<test module>/<test>[<engine>-<case>].json`, one JSON document each (an
oracle's always in the framework's goldens/; an engine under test's in the team's own directory when
`--goldens-dir DIR` names one: `DIR/<suite>/...`, see `goldens_root_of`):

    {"golden_format": 1, "schema_version": "1", "case_id": ..., "engine": {name, version},
     "device_profile": "h200", "status": ..., "message": ..., "provenance": {...},
     <the sections the suite checks>: ...}

Contract:
- A golden is written only by `pytest --snapshot-update` (syrupy's own flag); a normal run
  never writes one, and a missing golden fails the test. An engine under test never writes a
  golden under a shipped oracle's name (`conformance.engines.shipped`).
- A golden file without `golden_format` (or with another one) raises `GoldenFormatError`
  (`check_golden` fails the test with its message, no traceback).
- Under `--snapshot-update`, every rewritten golden's moved fields are listed by dotted path
  in the "golden updates" terminal summary (see `describe_moves`).
- `check_golden` judges the live observation's view with `verdicts.golden_verdict`, the one
  golden comparison (the job uses it too): another engine version or device profile fails with a
  message saying so; otherwise every differing field is listed by its dotted JSON path. A missing
  golden fails for an oracle and is skipped for an engine under test (regression protection only).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from conformance import paths
from conformance.checks.diff import json_diff
from conformance.checks.golden import golden_verdict
from conformance.documents.golden_doc import (GOLDEN_FORMAT, GoldenFormatError, GoldenMissingError, dumps, golden_view, portable, read_golden_text)
from conformance.engines.roles import ORACLE, UNDER_TEST
from conformance.engines.shipped import reserved_oracle_names


class GoldenExtension(JSONSnapshotExtension):
    """syrupy extension: goldens under `<root>/<suite>/`, serialized as sorted JSON; `root` is the
    framework's `goldens/` unless a subclass from `extension_for(root)` names another."""

    goldens_root: Path | None = None

    @classmethod
    def dirname(cls, *, test_location) -> str:
        test_file = Path(test_location.filepath)
        suite = test_file.parent.name
        return str((cls.goldens_root or paths.goldens_dir()) / suite / test_location.basename)

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


@lru_cache(maxsize=None)
def extension_for(root: Path | None) -> type[GoldenExtension]:
    """The extension that keeps goldens under `root` (None: the framework's goldens/). A pure function
    of `root`, cached so one directory has one class (syrupy groups snapshots by extension class)."""
    if root is None:
        return GoldenExtension
    return type("TeamGoldenExtension", (GoldenExtension,), {"goldens_root": Path(root).resolve()})


def goldens_root_of(role: str, under_test_root: Path | None) -> Path:
    """Where an engine's own goldens live: an oracle's always in the framework's goldens/ (the
    expectation, versioned with the framework); an engine under test's in `under_test_root` when the
    team gives one (`--goldens-dir`), else in the framework's."""
    if role != ORACLE and under_test_root is not None:
        return Path(under_test_root).resolve()
    return paths.goldens_dir()


def golden_lookup(roles: Mapping[str, str], under_test_root: Path | None):
    """`find_golden` with each engine's goldens in its role's directory (`goldens_root_of`). An engine
    `roles` does not name is asked for as the oracle a check compares with, not planned in this run: a
    shipped oracle's name is that oracle's (`shipped.reserved_oracle_names`), any other is under test."""
    def role(engine: str) -> str:
        if engine in roles:
            return roles[engine]
        return ORACLE if engine in reserved_oracle_names() else UNDER_TEST

    def lookup(suite: str, engine: str, case_id: str) -> dict[str, Any]:
        return find_golden(suite, engine, case_id, goldens_root_of(role(engine), under_test_root))
    return lookup


def golden_path(snapshot) -> Path:
    """Where syrupy keeps this test's golden (the test's parametrization id names it)."""
    return Path(snapshot.extension.get_location(test_location=snapshot.test_location, index=snapshot.index))


def read_golden_at(path: Path) -> dict[str, Any] | None:
    """The golden at `path`, None when there is none; `GoldenFormatError` for an unreadable one."""
    if not path.is_file():
        return None
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise GoldenFormatError(f"{path}: unreadable golden: {exc}") from None
    return read_golden_text(text, str(path))


def check_golden(snapshot, obs: dict[str, Any], suite: str, is_oracle: bool, sections: Iterable[str]):
    """The suite's golden test of one observation: under --snapshot-update, (re)record it and say
    what moved; otherwise judge it with the one golden comparison (`verdicts.golden_verdict`, the
    job uses the same) and return the verdict for the caller to `expect`. `assert snapshot == view`
    runs only where a golden exists and matches, so syrupy never writes outside an update."""
    view = golden_view(obs, sections)
    path = golden_path(snapshot)
    if snapshot.session.update_snapshots:
        _refuse_oracle_golden_from_under_test(obs, is_oracle, path)
        _report_moves(snapshot, path, view)
        _drop_if_unreadable(path)
        assert snapshot == view
        return None
    try:
        golden = read_golden_at(path)
        missing = (f"no golden of the oracle {obs['engine']['name']} at {path}: record the oracle's goldens with "
                   f"`pytest suites/{suite} --engines {obs['engine']['name']} --snapshot-update`")
    except GoldenFormatError as exc:
        golden, missing = None, str(exc)
        if not is_oracle:   # an unreadable regression golden is a failure, not an absence
            pytest.fail(missing, pytrace=False)
    verdict = golden_verdict(suite, obs, golden, str(path), is_oracle, missing_reason=missing)
    if verdict.outcome == "pass":
        assert snapshot == view
    return verdict


UPDATE_PROPERTY = "golden_update"


def _refuse_oracle_golden_from_under_test(obs: dict[str, Any], is_oracle: bool, path: Path) -> None:
    """An oracle's golden is recorded from that oracle only: an engine under test named like a shipped
    oracle (a file the registry would refuse, built some other way) fails instead of writing it."""
    name = obs["engine"]["name"]
    if not is_oracle and name in reserved_oracle_names():
        pytest.fail(f"refused to write {path}: {name} is a shipped oracle's name, and this observation comes from "
                    f"an engine under test; an oracle's golden is recorded from that oracle only", pytrace=False)


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


def find_golden(suite: str, engine: str, case_id: str, goldens_root: Path | None = None) -> dict[str, Any]:
    """The recorded golden of `engine` on `case_id` in `suite` (to compare another engine with it),
    under `goldens_root` (default: the framework's goldens/).

    Raises `GoldenFormatError` naming what is missing: a parity check must never pass for want of
    a golden."""
    root = (goldens_root or paths.goldens_dir()) / suite
    hits = sorted(p for p in root.glob("*/*.json") if p.stem.endswith(f"[{engine}-{case_id}]"))
    if not hits:
        raise GoldenMissingError(f"no {engine} golden for case {case_id!r} under {root}")
    if len(hits) > 1:
        raise GoldenFormatError(f"several {engine} goldens for {case_id!r} under {root}: {', '.join(map(str, hits))}")
    try:
        text = hits[0].read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GoldenFormatError(f"{hits[0]}: unreadable golden: {exc}") from None
    return read_golden_text(text, str(hits[0]))
