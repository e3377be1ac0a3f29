"""The one check table: which check judges which role of engine on which cases, against which oracle.

`pytest suites/` is generated from `CHECKS` (conformance.suite) and `conformance run` judges with
`judge_run`, both through `evaluate`, so the two cannot disagree. A check names the role it judges
(`under-test` or `oracle`) and the oracle whose document it compares with; nothing here selects
an engine by its own name.

The oracle's document for a case is its goldens of every suite merged (header, budget, memory,
trace); with no golden, the oracle's live observation of this run or session, said so in the
verdict's source; with neither, a check that needs it fails with the reason.

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
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from conformance import verdicts as v
from conformance.golden_doc import GoldenFormatError, GoldenMissingError
from conformance.verdicts import FAIL, MISSING_GOLDEN, SKIP, SUITE_SECTIONS, Verdict

UNREADABLE_GOLDEN = "unreadable-golden"

ORACLE, UNDER_TEST = "oracle", "under-test"
BOTH = (ORACLE, UNDER_TEST)


@dataclass(frozen=True)
class CheckInput:
    obs: dict[str, Any]
    case_spec: dict[str, Any]
    other: dict[str, Any] | None = None      # the oracle's document (golden or live), None if none
    source: str = ""                         # where `other` came from
    partner: dict[str, Any] | None = None    # the same engine's observation of the partner case


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

# Run mode: judged on a live observation (`conformance ladder`, the GPU nightly), from what was measured
# outside the engine (harness.live_sampler); a plan cannot show these.
LIVE_CHECKS: tuple[CheckSpec, ...] = (
    CheckSpec("live.device_memory_within_bound", "live", BOTH,
              lambda i: v.live_device_memory_within_bound(i.obs, i.case_spec),
              reads=("throughput.live",)),
    CheckSpec("live.concurrency_served", "live", BOTH, lambda i: v.live_concurrency_served(i.obs, i.case_spec),
              reads=("throughput.live",)),
)


def judge_live(obs: dict[str, Any], case_spec: dict[str, Any]) -> list[Verdict]:
    return [c.run(CheckInput(obs, dict(case_spec))) for c in LIVE_CHECKS]


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
    return check.run(CheckInput(obs, dict(case_spec), other, source, partner))


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
        return observations.get((case_id, engine))

    out: list[Verdict] = []
    for case in cases:
        for (cid, engine), obs in observations.items():
            if cid != case["id"]:
                continue
            role = roles.get(engine, UNDER_TEST)
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
