"""The one check table: which check judges which role of engine on which cases, against which oracle.

`pytest suites/` is generated from `CHECKS` (conformance.suite) and `conformance run` judges with
`judge_run`, both through `evaluate`, so the two cannot disagree. A check that raises on what an
engine reported is that check's failing verdict, naming the check and the error (cause
`check-raised`), never a lost run. A check names the role it judges
(`under-test` or `oracle`) and the oracle whose document it compares with; nothing here selects
an engine by its own name.

The oracle's document for a case is its goldens of every suite merged (header, budget, memory,
trace); with no golden, the oracle's live observation of this run or session (only an engine of
role oracle: an engine under test is never an oracle's document, whatever its name), said so in
the verdict's source; with neither, a check that needs it fails with the reason.

    check                                judges       against  cases                 reads
    <suite>.golden (budget/memory/trace) both roles   -        every                 the suite's section
    budget.parity_with_vllm              under-test   vllm     every                 status, budget.*
    budget.active_seqs_not_below_sglang  under-test   sglang   every                 budget.max_num_seqs, memory.max_concurrency
    memory.inside_bound                  under-test   -        every                 memory.outside_bound, ledger_bytes, bound_bytes
    memory.ledger_holds_seats            under-test   -        every                 memory.per_sequence, max_concurrency, ledger_bytes
    memory.per_sequence_equals_vllm      under-test   vllm     every                 memory.per_sequence
    memory.seats_equal_vllm              under-test   vllm     every                 memory.max_concurrency
    memory.unified_pool_seats            under-test   vllm     seed-unified-pool-c32-k8  memory.outside_bound, ledger_bytes, bound_bytes, per_sequence, max_concurrency
    memory.explains_short_seats          under-test   -        every                 message, memory.max_concurrency
    memory.draft_kv_scaling              both roles   -        seed-draft-kv-c8 (+c32)   memory.per_sequence, outside_bound
    trace.steps_within_budget            under-test   vllm     every                 trace.steps, budget
    trace.equals_vllm                    under-test   vllm     every                 trace.steps

Live rows (`LIVE_CHECKS`, judged on run observations: suites/live/README.md), the oracle's document being
its run observation of the same run, else its live golden:

    live.golden                          both roles   -        live cases            throughput.rungs, .plan, .live
    live.acceptance_equals_vllm          under-test   vllm     live cases            rungs[*].mean_acceptance_length, accepted_per_pos
    live.throughput_parity_vllm          under-test   vllm     live cases            rungs[*].*_repeats (intervals)
    live.plan_matches_run                under-test   -        live cases            throughput.plan, plan_expected
    live.device_memory_within_bound      both roles   vllm     live cases            throughput.live.by_phase, cuda_total_bytes
    live.concurrency_served              both roles   -        live cases            throughput.live.by_phase[top].max_running_requests
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from conformance import verdicts as v
from conformance.live import checks as lc
from conformance.golden_doc import GoldenFormatError, GoldenMissingError
from conformance.roles import BOTH, ORACLE, UNDER_TEST
from conformance.verdicts import FAIL, MISSING_GOLDEN, SKIP, SUITE_SECTIONS, Verdict

UNREADABLE_GOLDEN = "unreadable-golden"


@dataclass(frozen=True)
class CheckInput:
    obs: dict[str, Any]
    case_spec: dict[str, Any]
    other: dict[str, Any] | None = None      # the oracle's document (golden or live), None if none
    source: str = ""                         # where `other` came from
    partner: dict[str, Any] | None = None    # the same engine's observation of the partner case
    is_oracle: bool = False                  # the judged engine's role is oracle


@dataclass(frozen=True)
class CheckSpec:
    name: str
    suite: str
    judges: tuple[str, ...]                  # roles this check judges
    run: Callable[[CheckInput], Verdict]
    against: str | None = None               # the oracle whose document it compares with
    needs_against: bool = True               # False: runs with other=None when the oracle has no document
    case_globs: tuple[str, ...] = ("*",)
    partner: str | None = None               # a second case of the same engine (a cross-case check)
    golden: bool = False                     # the suite's own-golden check (run through syrupy in pytest)
    reads: tuple[str, ...] = ()              # the observation fields it reads (docs/observation.md)

    def applies(self, role: str, case_id: str) -> bool:
        return role in self.judges and any(fnmatch.fnmatchcase(case_id, g) for g in self.case_globs)


def _golden_check(suite: str) -> CheckSpec:
    def run(_: CheckInput) -> Verdict:  # evaluated by evaluate_golden (it needs the engine's own golden)
        raise AssertionError("golden checks are evaluated by evaluate_golden")
    return CheckSpec(f"{suite}.golden", suite, BOTH, run, golden=True,
                     reads=("status", "message", "provenance") + SUITE_SECTIONS[suite])


CHECKS: tuple[CheckSpec, ...] = (
    _golden_check("budget"),
    CheckSpec("budget.parity_with_vllm", "budget", (UNDER_TEST,),
              lambda i: v.budget_parity_with_vllm(i.obs, i.other, i.case_spec, i.source), against="vllm",
              reads=("status", "budget.max_num_batched_tokens", "budget.max_num_scheduled_tokens", "budget.drafting_slots_per_request", "budget.lookahead_tokens", "budget.max_num_seqs", "budget.max_active_seqs")),
    CheckSpec("budget.active_seqs_not_below_sglang", "budget", (UNDER_TEST,),
              lambda i: v.active_seqs_not_below_sglang(i.obs, i.other, i.case_spec, i.source), against="sglang",
              reads=("budget.max_num_seqs", "memory.max_concurrency", "budget.max_active_seqs")),
    _golden_check("memory"),
    CheckSpec("memory.inside_bound", "memory", (UNDER_TEST,), lambda i: v.inside_the_bound(i.obs, i.case_spec),
              reads=("memory.outside_bound", "memory.ledger_bytes", "memory.bound_bytes", "memory.per_sequence.draft_kv_bytes")),
    CheckSpec("memory.ledger_holds_seats", "memory", (UNDER_TEST,), lambda i: v.ledger_holds_seats(i.obs, i.case_spec),
              reads=("memory.per_sequence.attention_kv_bytes", "memory.per_sequence.recurrent_state_bytes", "memory.per_sequence.draft_kv_bytes", "memory.max_concurrency", "budget.max_num_seqs", "memory.ledger_bytes", "memory.outside_bound")),
    CheckSpec("memory.per_sequence_equals_vllm", "memory", (UNDER_TEST,),
              lambda i: v.per_sequence_equals_vllm(i.obs, i.other, i.case_spec, i.source), against="vllm",
              reads=("memory.per_sequence.attention_kv_bytes", "memory.per_sequence.recurrent_state_bytes", "memory.per_sequence.draft_kv_bytes", "memory.per_sequence.state_slots", "memory.pool.block_size_tokens", "memory.pool.page_size_bytes", "memory.ledger_bytes", "memory.outside_bound")),
    CheckSpec("memory.seats_equal_vllm", "memory", (UNDER_TEST,),
              lambda i: v.seats_equal_vllm(i.obs, i.other, i.case_spec, i.source), against="vllm",
              reads=("memory.max_concurrency", "memory.pool.size_bytes", "memory.pool.block_size_tokens", "memory.pool.page_size_bytes", "memory.ledger_bytes", "memory.per_sequence.attention_kv_bytes", "memory.per_sequence.recurrent_state_bytes", "memory.per_sequence.draft_kv_bytes")),
    CheckSpec("memory.unified_pool_seats", "memory", (UNDER_TEST,),
              lambda i: v.unified_pool_seats(i.obs, i.other, i.case_spec, 32, i.source), against="vllm",
              case_globs=("seed-unified-pool-c32-k8",),
              reads=("memory.outside_bound", "memory.ledger_bytes", "memory.bound_bytes", "memory.per_sequence.attention_kv_bytes", "memory.per_sequence.recurrent_state_bytes", "memory.per_sequence.draft_kv_bytes", "memory.max_concurrency", "budget.max_active_seqs")),
    CheckSpec("memory.explains_short_seats", "memory", (UNDER_TEST,), lambda i: v.explains_short_seats(i.obs),
              reads=("message", "memory.max_concurrency", "budget.max_num_seqs")),
    CheckSpec("memory.draft_kv_scaling", "memory", BOTH, lambda i: v.draft_kv_scaling(i.obs, i.partner, i.case_spec),
              case_globs=("seed-draft-kv-c8",), partner="seed-draft-kv-c32",
              reads=("memory.per_sequence.attention_kv_bytes", "memory.per_sequence.recurrent_state_bytes", "memory.per_sequence.draft_kv_bytes", "memory.outside_bound", "memory.ledger_bytes", "memory.bound_bytes", "budget.max_num_seqs")),
    _golden_check("trace"),
    CheckSpec("trace.steps_within_budget", "trace", (UNDER_TEST,),
              lambda i: v.steps_within_budget(i.obs, i.other, i.source), against="vllm", needs_against=False,
              reads=("trace.steps.total_num_scheduled_tokens", "trace.steps.num_scheduled_requests", "budget.max_num_scheduled_tokens", "budget.drafting_slots_per_request", "budget.max_active_seqs")),
    CheckSpec("trace.equals_vllm", "trace", (UNDER_TEST,),
              lambda i: v.trace_equals_vllm(i.obs, i.other, i.case_spec, i.source), against="vllm",
              reads=("trace.steps.total_num_scheduled_tokens", "trace.steps.num_scheduled_requests", "trace.steps.num_spec_tokens", "trace.steps.num_preempted", "memory.pool.size_bytes")),
)

# Run mode: judged on a live observation (`conformance run --live`, `pytest suites/live -m gpu`,
# `conformance ladder`), from what was measured outside the engine and against the oracle's live figures
# (conformance.live.checks): its observation of the same run on the same card, else its live golden.
LIVE_CHECKS: tuple[CheckSpec, ...] = (
    CheckSpec(lc.GOLDEN, "live", BOTH, lambda i: lc.live_golden(i.obs, i.other, i.case_spec, False, i.source),
              golden=True, reads=("throughput.rungs", "throughput.live")),
    CheckSpec(lc.ACCEPTANCE, "live", (UNDER_TEST,),
              lambda i: lc.acceptance_equals_oracle(i.obs, i.other, i.case_spec, i.source), against="vllm",
              reads=("throughput.rungs",)),
    CheckSpec(lc.THROUGHPUT, "live", (UNDER_TEST,),
              lambda i: lc.throughput_parity(i.obs, i.other, i.case_spec, i.source, i.source.startswith(SAME_RUN)),
              against="vllm", reads=("throughput.rungs",)),
    CheckSpec(lc.PLAN, "live", (UNDER_TEST,), lambda i: lc.plan_matches_run(i.obs, i.case_spec),
              reads=("throughput.plan", "throughput.plan_expected")),
    CheckSpec(lc.MEMORY, "live", BOTH, lambda i: lc.device_memory(i.obs, i.other, i.case_spec, i.source, i.is_oracle),
              against="vllm", needs_against=False, reads=("throughput.live",)),
    CheckSpec("live.concurrency_served", "live", BOTH, lambda i: v.live_concurrency_served(i.obs, i.case_spec),
              reads=("throughput.live",)),
)
SAME_RUN = "measured in this run"


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
        from conformance.goldens import find_golden

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
                out.append(lc.live_golden(obs, golden, dict(case_spec), role == ORACLE, why))
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
    return v.golden_verdict(suite, obs, golden, why if golden is not None else "", is_oracle, missing_reason=why)


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
        from conformance.goldens import find_golden

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
