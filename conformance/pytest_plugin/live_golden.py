"""Live goldens: an engine's live figures on a case, recorded on the profile's card through
`pytest suites/live -m gpu --snapshot-update`, judged with intervals.

Layout: `goldens/live/test_live/test_live_golden[<engine>-<case>].json`: the golden header
(`golden_doc.golden_view`: golden_format, engine, case, status, provenance) plus `live`, the
`view.live_view` of the run (per rung the per-wave samples and the distributions, acceptance per
position, the footprint per phase, the startup figures, the card, the engine's environment and every
deviation from its defaults).

Contract: `check_live_golden(snapshot, obs, case_spec, is_oracle)` records under --snapshot-update
(only an `ok` observation: a failed run is never an expectation) and returns None; otherwise it reads
the golden syrupy holds and returns `checks.live_checks.live_golden`'s verdict, telling syrupy the golden was used.
"""

from __future__ import annotations

from typing import Any

import pytest

from conformance.checks import live_checks as checks
from conformance.checks.live_view import live_view
from conformance.checks.verdicts import Verdict
from conformance.documents.golden_doc import GoldenFormatError, golden_view, portable


def live_golden_doc(obs: dict[str, Any]) -> dict[str, Any]:
    doc = golden_view(obs, ())
    doc["live"] = portable(live_view(obs))
    return doc


def check_live_golden(snapshot, obs: dict[str, Any], case_spec: dict[str, Any], is_oracle: bool) -> Verdict | None:
    from conformance.checks.goldens import golden_path, read_golden_at

    doc = live_golden_doc(obs)
    if snapshot.session.update_snapshots:
        if obs["status"] != "ok":
            pytest.fail(f"not recorded: {obs['engine']['name']} {obs['status']} on {obs['case_id']}: "
                        f"{(obs.get('message') or '').strip()[:2000]}", pytrace=False)
        assert snapshot == doc
        return None
    path = golden_path(snapshot)
    try:
        golden, missing = read_golden_at(path), f"no live golden at {path}"
    except GoldenFormatError as exc:
        pytest.fail(str(exc), pytrace=False)
    if golden is not None:
        # the judgement read the golden: tell syrupy, else a run that passes exits 1 with the golden "unused"
        assert snapshot == golden, f"{path} is not as --snapshot-update writes it: record it again"
    if obs["status"] != "ok":
        pytest.fail(f"{obs['engine']['name']} {obs['status']} on {obs['case_id']}: "
                    f"{(obs.get('message') or '').strip()[-3000:]}", pytrace=False)
    return checks.live_golden(obs, golden, case_spec, is_oracle, missing)
