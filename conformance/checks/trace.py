"""The trace suite's checks (suites/trace/README.md): the per-step schedule of each engine's own
scheduler, against its own budget and vLLM's steps.

Contract: each check is `run(CheckInput) -> Verdict` (`checks.row`); `ROWS` are the suite's rows of
the check table, its golden first.
"""

from __future__ import annotations

from conformance.checks.common import (documents_status_difference, engine_label, human_bytes, intended,
                                       not_reported, null_fields, verdict)
from conformance.checks.golden import golden_row
from conformance.checks.memory import own_pools
from conformance.checks.row import UNDER_TEST, CheckInput, CheckSpec
from conformance.checks.verdicts import FAIL, PASS, SKIP, Verdict
from conformance.documents.observation import STEP_FIELDS


def steps_within_budget(given: CheckInput) -> Verdict:
    """No step schedules more than the budget: each step's `total_num_scheduled_tokens` plus the
    drafting slots reserved for its `num_scheduled_requests` stays within max_num_scheduled_tokens,
    and its requests within max_active_seqs -- by the engine's own budget, and by vLLM's (its
    budget and its drafting slots per request) when vLLM plans the case."""
    obs, vllm, source = given.obs, given.other, given.source
    check = "trace.steps_within_budget"
    if obs["status"] != "ok" or not obs.get("trace"):
        return verdict(check, obs, SKIP, f"{obs['status']}: no trace ({obs.get('message')})")
    steps = obs["trace"]["steps"]
    if not steps:
        return verdict(check, obs, FAIL, "trace.steps is empty: an ok trace has at least one step")
    unreported = null_fields("budget", obs.get("budget"), ("max_num_scheduled_tokens", "drafting_slots_per_request",
                                                           "max_active_seqs"))
    if unreported:
        return verdict(check, obs, FAIL, f"{not_reported(unreported)} (each of the {len(steps)} steps is charged against "
                       f"the engine's own budget)", unreported)
    budgets = [("its own budget", obs.get("budget") or {})]
    if vllm is not None and vllm.get("status") == "ok" and vllm.get("budget"):
        budgets.append((f"vLLM's budget [{source}]", vllm["budget"]))
    problems = []
    for label, b in budgets:
        cap, slots, seats = b.get("max_num_scheduled_tokens"), b.get("drafting_slots_per_request") or 0, b.get("max_active_seqs")
        for i, s in enumerate(steps):
            charged = s["total_num_scheduled_tokens"] + slots * s["num_scheduled_requests"]
            if cap is not None and charged > cap:
                problems.append(f"step {i}: trace.steps[{i}].total_num_scheduled_tokens {s['total_num_scheduled_tokens']}"
                                f" + {slots} drafting slots x {s['num_scheduled_requests']} requests = {charged} tokens "
                                f"> max_num_scheduled_tokens {cap} of {label} by {charged - cap} tokens")
            if seats is not None and s["num_scheduled_requests"] > seats:
                problems.append(f"step {i}: {s['num_scheduled_requests']} requests > max_active_seqs {seats} of {label}")
    if problems:
        return verdict(check, obs, FAIL, f"{len(problems)} step(s) over the step budget: {problems[0]}", problems)
    return verdict(check, obs, PASS, f"{len(steps)} steps within {' and '.join(label for label, _ in budgets)}")


TRACE_DIFFERENCES = ("equal_until_first_preemption",)


def trace_equals_vllm(given: CheckInput) -> Verdict:
    """Step for step equal to vLLM on the four counted fields. A case may document a trace
    difference for this engine (`intended_differences` field `trace`, `engines` naming it or `*`)
    with `expected` one of TRACE_DIFFERENCES:
    `equal_until_first_preemption` checks equality through vLLM's first preempting step, and that
    the traces do differ after it (a stale entry fails). On a gpu_memory_utilization case whose
    pools differ in bytes (each engine's own reserves) the check is skipped, naming both pools."""
    obs, vllm, case_spec, source = given.obs, given.other, given.case_spec, given.source
    check = "trace.equals_vllm"
    me = obs["engine"]["name"]
    if vllm["status"] != "ok" or documents_status_difference(case_spec, "vllm", me):
        return verdict(check, obs, SKIP, f"vLLM {vllm['status']}: {vllm.get('message')} (status compared by "
                       f"budget.parity_with_vllm) [{source}]")
    if obs["status"] != "ok" or not obs.get("trace"):
        return verdict(check, obs, FAIL, f"{me} has no trace where vLLM schedules {len((vllm.get('trace') or {}).get('steps', []))}"
                       f" steps: {obs['status']} {obs.get('message') or '(trace is null)'} [{source}]")
    pools = own_pools(obs, vllm, case_spec)
    if pools is not None and pools[0] != pools[1]:
        return verdict(check, obs, SKIP, f"pools differ on a gpu_memory_utilization case: {me} {human_bytes(pools[0])}, vLLM "
                       f"{human_bytes(pools[1])} (each engine's reserves beside the pool are its own), so their schedules "
                       f"need not agree; traces are compared on the same bytes (kv_cache_bytes cases) [{source}]")
    mine = [{f: s[f] for f in STEP_FIELDS} for s in obs["trace"]["steps"]]
    theirs = [{f: s[f] for f in STEP_FIELDS} for s in (vllm.get("trace") or {}).get("steps", [])]
    first = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), None)
    if first is None and len(mine) != len(theirs):
        first = min(len(mine), len(theirs))
    documented = intended(case_spec, "vllm", "trace", me)

    def at(i: int) -> tuple[str, ...]:
        a = mine[i] if i < len(mine) else None
        b = theirs[i] if i < len(theirs) else None
        lines = [f"{me}: {a if a is not None else '(ended)'}", f"vllm: {b if b is not None else '(ended)'}"]
        if a and b:
            lines += [f"trace.steps[{i}].{f}: vLLM {b[f]}, {me} {a[f]} ({a[f] - b[f]:+d})" for f in STEP_FIELDS
                      if a[f] != b[f]]
        return tuple(lines)

    if documented:
        if documented["expected"] not in TRACE_DIFFERENCES:
            return verdict(check, obs, FAIL, f"unknown documented trace difference {documented['expected']!r} "
                           f"(known: {', '.join(TRACE_DIFFERENCES)})")
        preempt = next((i for i, s in enumerate(theirs) if s["num_preempted"] > 0), None)
        if preempt is None:
            return verdict(check, obs, FAIL, f"documented difference {documented['expected']} but vLLM never preempts "
                           f"[{source}]")
        if first is not None and first <= preempt:
            return verdict(check, obs, FAIL, f"traces differ at step {first}, before vLLM's first preemption at step "
                           f"{preempt} [{source}]", at(first))
        if first is None:
            return verdict(check, obs, FAIL, f"the case documents a trace difference after vLLM's preemption that no "
                           f"longer exists: the traces are equal [{source}]")
        return verdict(check, obs, PASS, f"equal through vLLM's first preemption (step {preempt}), then differ from step "
                       f"{first} as documented: {documented['reason']} [{source}]")
    if first is not None:
        return verdict(check, obs, FAIL, f"trace differs from {engine_label(vllm)} first at step {first} of {len(theirs)} "
                       f"({len(mine)} steps in {me}'s) [{source}]", at(first))
    return verdict(check, obs, PASS, f"{len(mine)} steps equal vLLM's [{source}]")



ROWS: tuple[CheckSpec, ...] = (
    golden_row("trace"),
    CheckSpec("trace.steps_within_budget", "trace", (UNDER_TEST,), steps_within_budget,
              "a step's tokens plus the drafting slots of its requests pass max_num_scheduled_tokens, or its "
              "requests max_active_seqs (by its own budget, and by vLLM's when vLLM plans the case)",
              against="vllm", needs_against=False,
              reads=("trace.steps.total_num_scheduled_tokens", "trace.steps.num_scheduled_requests",
                     "budget.max_num_scheduled_tokens", "budget.drafting_slots_per_request",
                     "budget.max_active_seqs")),
    CheckSpec("trace.equals_vllm", "trace", (UNDER_TEST,), trace_equals_vllm,
              "a step differs from vLLM's (step, field, both values)", against="vllm",
              reads=tuple(f"trace.steps.{f}" for f in STEP_FIELDS) + ("memory.pool.size_bytes",)),
)
