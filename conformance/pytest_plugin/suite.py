"""Suite tests generated from the check table, so `pytest suites/` and `conformance run` judge alike.

A suite module is two lines:

    test_budget_golden = golden_test("budget")     # every engine x case: its own golden (syrupy)
    test_budget_checks = table_test("budget")      # every check_table.CHECKS entry of the suite

The plugin parametrizes `golden_test` over (engine, case) and `table_test` over (check, engine,
case) where the check applies to the engine's role and the case. Each test records its verdict
(`user_properties["verdict"]`) and turns it into the pytest outcome (`conformance.pytest_plugin.expect`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

from conformance.checks.check_table import CheckSpec, evaluate
from conformance.checks.verdicts import SUITE_SECTIONS, Verdict
from conformance.engines.roles import ORACLE
from conformance.pytest_plugin.expect import expect

SUITE_ATTR = "conformance_suite"
KIND_ATTR = "conformance_kind"


def record(request: pytest.FixtureRequest, verdict: Verdict | None, role: str | None = None) -> None:
    """Keep the verdict for the report and turn it into the test's outcome. An oracle's failed check
    (not its golden) is a finding about the oracle, xfailed with its message, as `conformance run`
    reports it (`report.model.is_finding`): it does not fail the session."""
    if verdict is not None:
        request.node.user_properties.append(("verdict", json.dumps(verdict.to_json(), sort_keys=True)))
        if role == ORACLE and verdict.failed:
            pytest.xfail(f"finding about the oracle {verdict.engine} (not a failure): {verdict.check} "
                         f"on {verdict.case_id}: {verdict.message}")
        expect(verdict)


def golden_test(suite: str) -> Callable[..., None]:
    def test(engine: str, case, observation: dict[str, Any], golden, conformance_session,
             request: pytest.FixtureRequest) -> None:
        from conformance.checks.goldens import check_golden

        role = conformance_session.engine(engine).role
        record(request, check_golden(golden, observation, suite, role == ORACLE, SUITE_SECTIONS[suite]))

    test.__doc__ = f"`{suite}.golden`: the {suite} section of every engine's observation equals its golden."
    setattr(test, SUITE_ATTR, suite)
    setattr(test, KIND_ATTR, "golden")
    return test


def table_test(suite: str) -> Callable[..., None]:
    def test(check: CheckSpec, engine: str, case, observation: dict[str, Any], conformance_session,
             request: pytest.FixtureRequest) -> None:
        s = conformance_session
        partner = None
        if check.partner is not None and s.has_case(check.partner):
            partner = s.observe(engine, s.case(check.partner))
        verdict = evaluate(check, observation, dict(case.spec, id=case.id), s.golden_lookup, s.live_lookup,
                           partner, partner_selected=check.partner is None or s.has_case(check.partner))
        record(request, verdict, s.engine(engine).role)

    test.__doc__ = f"Every `{suite}.*` check of conformance.checks.check_table that applies (see suites/{suite}/README.md)."
    setattr(test, SUITE_ATTR, suite)
    setattr(test, KIND_ATTR, "table")
    return test


def live_golden_test() -> Callable[..., None]:
    """`live.golden`: every engine served on every live case against its own live golden (intervals, the
    case's regression band). Under --snapshot-update it records the golden instead."""
    def test(engine: str, case, conformance_session, golden, request: pytest.FixtureRequest) -> None:
        from conformance.pytest_plugin.live_golden import check_live_golden

        obs = conformance_session.serve(engine, case)
        _attach(request, engine, case, obs)
        role = conformance_session.engine(engine).role
        record(request, check_live_golden(golden, obs, dict(case.spec, id=case.id), role == ORACLE))

    test.__doc__ = live_golden_test.__doc__
    setattr(test, SUITE_ATTR, "live")
    setattr(test, KIND_ATTR, "live-golden")
    return test


def live_table_test() -> Callable[..., None]:
    """Every non-golden live check of conformance.checks.check_table.LIVE_CHECKS that applies (suites/live/README.md)."""
    def test(check: CheckSpec, engine: str, case, conformance_session, request: pytest.FixtureRequest) -> None:
        from conformance.checks.check_table import judge_live

        s = conformance_session
        obs = s.serve(engine, case)
        _attach(request, engine, case, obs)
        role = s.engine(engine).role
        verdicts = [v for v in judge_live(obs, dict(case.spec, id=case.id), role, s.golden_lookup, s.served_lookup)
                    if v.check == check.name]
        record(request, verdicts[0] if verdicts else None)

    test.__doc__ = live_table_test.__doc__
    setattr(test, SUITE_ATTR, "live")
    setattr(test, KIND_ATTR, "live-table")
    return test


def live_peer_test() -> Callable[..., None]:
    """`--live-peer transformers`: plain transformers generation on the live case's target, measured in the
    same session on the same card as the engines (conformance.harness.transformers_peer). Passes when it
    completed every rung on the engines' hardware; writes its observation and its ratios to every engine
    served on the case beside the engines' logs (<store>/live/transformers/). Informational: no engine is
    judged against it."""
    def test(case, conformance_session, request: pytest.FixtureRequest) -> None:
        from conformance.harness.peer_run import run_peer

        s = conformance_session
        served = {name: s.serve(name, case) for name, e in s.engines.items() if s.serves(name, case)}
        peer, ratios = run_peer(case, served, Path(s.store.root) / "live" / "transformers")
        print(f"transformers peer on {case.id}: {json.dumps(ratios, sort_keys=True)}")
        assert peer["status"] == "ok", f"the transformers peer did not complete its ladder: {peer['message']}"
        other = {name: obs["device"]["hardware"] for name, obs in served.items()
                 if obs["device"]["hardware"] != peer["device"]["hardware"]}
        assert not other, f"the peer ran on {peer['device']['hardware']!r}, engines elsewhere: {other}"

    test.__doc__ = live_peer_test.__doc__
    setattr(test, SUITE_ATTR, "live")
    setattr(test, KIND_ATTR, "live-peer")
    return test


def _attach(request: pytest.FixtureRequest, engine: str, case, obs: dict[str, Any]) -> None:
    request.node.user_properties += [("engine", engine), ("case_id", case.id),
                                     ("observation", json.dumps(obs, sort_keys=True))]
