"""The one check table: which check judges which role of engine on which cases, against which oracle.

The rows are the suites' (`conformance.checks`: one module per suite, each holding its check functions
and their rows); here they are assembled into `CHECKS` (plan mode) and `LIVE_CHECKS` (run mode), and
each check is given its one input (`checks.row.CheckInput`). README.md's check table and the tables of
suites/*/README.md are generated from these rows (`conformance docs`).

`pytest suites/` is generated from `CHECKS` (conformance.pytest_plugin.suite) and `conformance run` judges with
`judge_run`, both through `evaluate`, so the two cannot disagree. A check that raises on what an
engine reported is that check's failing verdict, naming the check and the error (cause
`check-raised`), never a lost run. A check names the role it judges
(`under-test` or `oracle`) and the oracle whose document it compares with; nothing here selects
an engine by its own name.

The oracle's document for a case is its goldens of every suite merged (header, budget, memory,
trace); with no golden, the oracle's live observation of this run or session (only an engine of
role oracle: an engine under test is never an oracle's document, whatever its name), said so in
the verdict's source; with neither, a check that needs it fails with the reason. Live rows are judged
on run observations (suites/live/README.md), the oracle's document being its run observation of the
same run, else its live golden.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from conformance.checks import budget, live as live_rows, memory, trace
from conformance.checks.golden import golden_verdict
from conformance.checks.live import SAME_RUN
from conformance.checks.row import BOTH, ORACLE, UNDER_TEST, CheckInput, CheckSpec
from conformance.checks.verdicts import FAIL, MISSING_GOLDEN, SKIP, SUITE_SECTIONS, Verdict
from conformance.documents.golden_doc import GoldenFormatError, GoldenMissingError

__all__ = ["BOTH", "CHECKS", "CHECK_RAISED", "LIVE_CHECKS", "ORACLE", "SAME_RUN", "UNDER_TEST", "CheckInput",
           "CheckSpec", "GoldenLookup", "LiveLookup", "checks_of", "evaluate", "evaluate_golden", "judge_live",
           "judge_run", "memoized", "oracle_document", "oracle_live_document"]

UNREADABLE_GOLDEN = "unreadable-golden"

CHECKS: tuple[CheckSpec, ...] = budget.ROWS + memory.ROWS + trace.ROWS
# Run mode: judged on a live observation (`conformance run --live`, `pytest suites/live -m gpu`,
# `conformance ladder`), from what was measured outside the engine and against the oracle's live figures
# (conformance.checks.live_checks): its observation of the same run on the same card, else its live golden.
LIVE_CHECKS: tuple[CheckSpec, ...] = live_rows.ROWS


def oracle_live_document(oracle: str, case_id: str, lookup: "GoldenLookup",
                         live: "LiveLookup") -> tuple[dict[str, Any] | None, str]:
    """The oracle's live figures for a case: its run observation of this run (the same card, minutes
    apart: engines compare as ratios measured in one run), else its live golden, else None and why."""
    obs = live(oracle, case_id)
    if obs is not None and obs.get("status") == "ok":
        return obs, f"{SAME_RUN}: {oracle} {obs['engine']['version']} on {(obs.get('device') or {}).get('hardware')}"
    try:
        golden = lookup("live", oracle, case_id)
    except GoldenFormatError as exc:
        return None, str(exc)
    return golden, f"{oracle} {(golden.get('engine') or {}).get('version')} live golden " \
                   f"(recorded on {((golden.get('live') or {}).get('hardware'))})"


def judge_live(obs: dict[str, Any], case_spec: dict[str, Any], role: str = UNDER_TEST,
               lookup: "GoldenLookup | None" = None, live: "LiveLookup | None" = None) -> list[Verdict]:
    """Every live check of one engine's run observation (see LIVE_CHECKS); `lookup` finds goldens
    (default: the repository's), `live` the other engines' run observations of the same run."""
    if lookup is None:
        from conformance.checks.goldens import find_golden

        lookup = find_golden
    live = live or (lambda engine, case_id: None)
    engine, out = obs["engine"]["name"], []
    for check in LIVE_CHECKS:
        if role not in check.judges:
            continue
        if check.golden:
            try:
                golden, why = lookup("live", engine, obs["case_id"]), ""
            except GoldenFormatError as exc:
                golden, why = None, str(exc)
                if not isinstance(exc, GoldenMissingError):
                    out.append(Verdict(check.name, engine, obs["case_id"], FAIL, f"unreadable live golden: {exc}",
                                       cause=UNREADABLE_GOLDEN))
                    continue
            try:
                out.append(check.run(CheckInput(obs, dict(case_spec), golden, why, is_oracle=role == ORACLE)))
            except Exception as exc:  # noqa: BLE001 -- the check's failing verdict, never a lost run
                out.append(_raised(check.name, obs, obs["case_id"], exc))
            continue
        other, source = None, ""
        if check.against:
            other, source = oracle_live_document(check.against, obs["case_id"], lookup, live)
            if other is None and check.needs_against:
                live_spec = case_spec.get("live") or {}
                if not live_spec or live_spec.get("device") == "cpu":   # not a live case, or no oracle serves it
                    why = ("a case served on a CPU: no oracle serves it" if live_spec else
                           "the case has no `live:` section, so no oracle's live figures are kept for it")
                    out.append(Verdict(check.name, engine, obs["case_id"], SKIP, f"{why}: there are no "
                                       f"{check.against} figures to compare with ({source})"))
                else:
                    out.append(Verdict(check.name, engine, obs["case_id"], FAIL, f"nothing to compare with: {source}; "
                                       f"and {check.against} was not served in this run", cause=MISSING_GOLDEN))
                continue
        out.append(_run_check(check, CheckInput(obs, dict(case_spec, id=obs["case_id"]) if "id" not in case_spec
                                                else dict(case_spec), other, source, is_oracle=role == ORACLE)))
    return out


CHECK_RAISED = "check-raised"


def _run_check(check: CheckSpec, given: CheckInput) -> Verdict:
    """`check.run(given)`; a check that raises on what an engine reported fails, naming the check and
    the error, instead of losing the run (every other verdict and the report are still written)."""
    try:
        return check.run(given)
    except Exception as exc:  # noqa: BLE001 -- any error of a check is that check's failing verdict
        return _raised(check.name, given.obs, given.case_spec.get("id", "?"), exc)


def _raised(check: str, obs: dict[str, Any], case_id: str, exc: Exception) -> Verdict:
    engine = (obs.get("engine") or {}).get("name", "?") if isinstance(obs, dict) else "?"
    text = str(exc).encode("utf-8", "backslashreplace").decode("utf-8")[:500]
    return Verdict(check, engine, case_id, FAIL, f"the check {check} could not judge this observation: "
                   f"{type(exc).__name__}: {text}", cause=CHECK_RAISED)


GoldenLookup = Callable[[str, str, str], dict[str, Any]]          # (suite, engine, case_id) -> golden; raises
LiveLookup = Callable[[str, str], "dict[str, Any] | None"]       # (engine, case_id) -> observation or None


def checks_of(suite: str) -> list[CheckSpec]:
    return [c for c in CHECKS if c.suite == suite]


def _golden(lookup: GoldenLookup, suite: str, engine: str, case_id: str) -> tuple[dict[str, Any] | None, str]:
    try:
        return lookup(suite, engine, case_id), f"{engine} golden in goldens/{suite}"
    except GoldenFormatError as exc:
        return None, str(exc)


def oracle_document(oracle: str, case_id: str, lookup: GoldenLookup,
                    live: LiveLookup) -> tuple[dict[str, Any] | None, str]:
    """The oracle's goldens of every suite merged into one document, else its live observation."""
    merged: dict[str, Any] | None = None
    for suite, sections in SUITE_SECTIONS.items():
        golden, why = _golden(lookup, suite, oracle, case_id)
        if golden is None:
            merged = None
            break
        merged = dict(golden) if merged is None else merged
        for s in sections:
            merged[s] = golden.get(s)
    if merged is not None:
        version = (merged.get("engine") or {}).get("version")
        return merged, f"{oracle} {version} goldens"
    obs = live(oracle, case_id)
    if obs is not None:
        return obs, f"live {oracle} {obs['engine']['version']} of this run, no golden"
    return None, why


def evaluate_golden(suite: str, obs: dict[str, Any], is_oracle: bool, lookup: GoldenLookup) -> Verdict:
    try:
        return _evaluate_golden(suite, obs, is_oracle, lookup)
    except Exception as exc:  # noqa: BLE001 -- see _run_check
        return _raised(f"{suite}.golden", obs, obs.get("case_id", "?"), exc)


def _evaluate_golden(suite: str, obs: dict[str, Any], is_oracle: bool, lookup: GoldenLookup) -> Verdict:
    engine = obs["engine"]["name"]
    try:
        golden, why = lookup(suite, engine, obs["case_id"]), f"{engine} golden in goldens/{suite}"
    except GoldenMissingError as exc:
        golden, why = None, str(exc)
    except GoldenFormatError as exc:   # a broken golden fails for either role: it is not an absence
        return Verdict(f"{suite}.golden", engine, obs["case_id"], FAIL, f"unreadable golden: {exc}",
                       cause=UNREADABLE_GOLDEN)
    if golden is None and is_oracle:
        why += f": record the oracle's goldens with `pytest suites/{suite} --engines {engine} --snapshot-update`"
    return golden_verdict(suite, obs, golden, why if golden is not None else "", is_oracle, missing_reason=why)


def evaluate(check: CheckSpec, obs: dict[str, Any], case_spec: dict[str, Any], lookup: GoldenLookup,
             live: LiveLookup, partner: dict[str, Any] | None = None, partner_selected: bool = True) -> Verdict:
    """One check of one engine's observation on one case (the check applies: see `applies`)."""
    engine, case_id = obs["engine"]["name"], case_spec["id"]
    if check.partner is not None and (partner is None or not partner_selected):
        return Verdict(check.name, engine, case_id, SKIP, f"needs {check.partner} planned in the same run "
                       f"(select both {case_id} and {check.partner})")
    other, source = None, ""
    if check.against:
        other, source = oracle_document(check.against, case_id, lookup, live)
        if other is None and check.needs_against:
            return Verdict(check.name, engine, case_id, FAIL, f"nothing to compare with: {source}; and "
                           f"{check.against} was not planned in this run", cause=MISSING_GOLDEN)
    return _run_check(check, CheckInput(obs, dict(case_spec), other, source, partner))


def memoized(lookup: GoldenLookup) -> GoldenLookup:
    """`lookup` read once per (suite, engine, case): every check of an engine asks for the same oracle
    goldens, and each read globs and parses files. A missing golden's error is remembered too."""
    seen: dict[tuple[str, str, str], tuple[dict[str, Any] | None, GoldenFormatError | None]] = {}

    def get(suite: str, engine: str, case_id: str) -> dict[str, Any]:
        key = (suite, engine, case_id)
        if key not in seen:
            try:
                seen[key] = (lookup(suite, engine, case_id), None)
            except GoldenFormatError as exc:
                seen[key] = (None, exc)
        golden, error = seen[key]
        if error is not None:
            raise error
        return golden
    return get


def judge_run(cases: Iterable[Mapping[str, Any]], observations: Mapping[tuple[str, str], dict[str, Any]],
              roles: Mapping[str, str], lookup: GoldenLookup | None = None) -> list[Verdict]:
    """Every applicable verdict of a run: `observations` by (case_id, engine), `roles` by engine
    (an engine of unknown role is judged as under test: nothing passes for want of a role)."""
    if lookup is None:
        from conformance.checks.goldens import find_golden

        lookup = find_golden
    lookup = memoized(lookup)
    case_ids = {c["id"] for c in cases}

    def live(engine: str, case_id: str) -> dict[str, Any] | None:
        if roles.get(engine) != ORACLE:   # an engine under test is never an oracle's document
            return None
        return observations.get((case_id, engine))

    out: list[Verdict] = []
    for case in cases:
        for (cid, engine), obs in observations.items():
            if cid != case["id"]:
                continue
            role = roles.get(engine, UNDER_TEST)
            if obs.get("mode") == "run":   # served live: the live checks, against the oracle's live figures
                out += judge_live(obs, dict(case), role, lookup, live)
                continue
            for check in CHECKS:
                if not check.applies(role, cid):
                    continue
                if check.golden:
                    out.append(evaluate_golden(check.suite, obs, role == ORACLE, lookup))
                    continue
                partner = observations.get((check.partner, engine)) if check.partner else None
                out.append(evaluate(check, obs, dict(case), lookup, live, partner,
                                    partner_selected=check.partner in case_ids if check.partner else True))
    return out
