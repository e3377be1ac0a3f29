"""The budget suite's checks (suites/budget/README.md): what an engine resolves from a case, against
vLLM's budget and SGLang's concurrency.

Contract: each check is `run(CheckInput) -> Verdict` (`checks.row`); `ROWS` are the suite's rows of
the check table, its golden first.
"""

from __future__ import annotations

from typing import Any

from conformance.checks.common import by, engine_label, intended, verdict, whom
from conformance.checks.diff import json_diff
from conformance.checks.golden import golden_row
from conformance.checks.row import UNDER_TEST, CheckInput, CheckSpec
from conformance.checks.verdicts import FAIL, PASS, SKIP, Verdict
from conformance.documents.observation import BUDGET_FIELDS


def budget_parity_with_vllm(given: CheckInput) -> Verdict:
    """Same status as vLLM, and every budget field equal, unless the case declares the difference
    (`intended_differences`, oracle vllm) for this engine (named in the entry's `engines`, or `*`):
    then the engine's value must be the entry's `expected`, and for a status difference vLLM's
    status must still differ (a stale entry fails). An entry of another engine does not apply."""
    obs, vllm, case_spec, source = given.obs, given.other, given.case_spec, given.source
    check = "budget.parity_with_vllm"
    me = obs["engine"]["name"]
    documented = intended(case_spec, "vllm", "status", me)
    if documented:
        if obs["status"] != documented["expected"]:
            return verdict(check, obs, FAIL, f"the case documents status {documented['expected']!r} for "
                           f"{whom(documented, me)} ({documented['reason']}), but {me} says {obs['status']}: "
                           f"{obs.get('message')} [{source}]")
        if vllm["status"] == obs["status"]:
            return verdict(check, obs, FAIL, f"the case documents a status difference from vLLM that no longer "
                           f"exists: both say {obs['status']} [{source}]")
        return verdict(check, obs, PASS, f"documented difference: vLLM {vllm['status']}, {me} "
                       f"{obs['status']} ({documented['reason']}) [{source}]")
    if obs["status"] != vllm["status"]:
        return verdict(check, obs, FAIL, f"status: vLLM says {vllm['status']} ({vllm.get('message') or 'no message'}),"
                       f" {me} says {obs['status']} ({obs.get('message') or 'no message'}) [{source}]")
    if vllm["status"] != "ok":
        return verdict(check, obs, PASS, f"both {vllm['status']} [{source}]")
    mine_b, theirs_b = obs.get("budget") or {}, vllm.get("budget") or {}
    problems: list[str] = []
    for d in json_diff({f: theirs_b.get(f) for f in BUDGET_FIELDS}, {f: mine_b.get(f) for f in BUDGET_FIELDS}):
        entry = intended(case_spec, "vllm", d.path, me)
        unit = "seqs" if "seqs" in d.path else ("slots" if "slots" in d.path else "tokens")
        if entry is None:
            problems.append(f"budget.{d.path}: vLLM {d.expected!r}, {me} {d.actual!r}{by(d.actual, d.expected, unit)}")
        elif d.actual != entry["expected"]:
            problems.append(f"budget.{d.path}: the case documents {entry['expected']!r} for {whom(entry, me)} "
                            f"({entry['reason']}), {me} has {d.actual!r}")
    if problems:
        return verdict(check, obs, FAIL, f"{len(problems)} budget field(s) differ from {engine_label(vllm)} on "
                       f"{obs['case_id']}: {problems[0]} [{source}]", problems)
    return verdict(check, obs, PASS, f"every budget field equals {engine_label(vllm)} [{source}]")


def memory_admitted_seqs(obs: dict[str, Any]) -> int | None:
    """How many sequences an engine's memory plan admits at once: max_num_seqs, capped by the
    full-length sequences the pool seats. (A per-step token budget cap, vLLM's
    max_num_batched_tokens // lookahead, is not part of it: SGLang has no such budget.)"""
    seats = (obs.get("memory") or {}).get("max_concurrency")
    asked = (obs.get("budget") or {}).get("max_num_seqs")
    if seats is None or asked is None:
        return None
    return min(int(asked), int(seats))


def active_seqs_not_below_sglang(given: CheckInput) -> Verdict:
    """The comparable quantity with SGLang is concurrency as memory admits it: the engine's
    `memory_admitted_seqs` is never below SGLang's `max_active_seqs` (max_running_requests after
    SGLang's memory caps, e.g. its mamba state cache), unless the case documents the difference
    (`intended_differences`, oracle sglang, field max_active_seqs, `engines` naming this engine or
    `*`): then the engine's figure must be the entry's `expected` and SGLang's must still be higher.
    An entry of another engine does not apply: this engine is judged by the rule."""
    obs, sglang, case_spec, source = given.obs, given.other, given.case_spec, given.source
    check = "budget.active_seqs_not_below_sglang"
    me = obs["engine"]["name"]
    if sglang["status"] != "ok" or obs["status"] != "ok":
        return verdict(check, obs, SKIP, f"SGLang {sglang['status']}, {me} {obs['status']}: nothing comparable "
                       f"[{source}]")
    mine, theirs = memory_admitted_seqs(obs), (sglang.get("budget") or {}).get("max_active_seqs")
    documented = intended(case_spec, "sglang", "max_active_seqs", me)
    if documented:
        if mine != documented["expected"] or theirs is None or theirs <= mine:
            return verdict(check, obs, FAIL, f"the case documents {whom(documented, me)} admitting "
                           f"{documented['expected']} below SGLang "
                           f"({documented['reason']}); now it admits {mine} and SGLang runs {theirs} [{source}]")
        return verdict(check, obs, PASS, f"documented difference: memory admits {mine}, SGLang runs {theirs} "
                       f"({documented['reason']}) [{source}]")
    if mine is None or theirs is None or mine < theirs:
        return verdict(check, obs, FAIL, f"{me}'s memory admits {mine} sequences (min of budget.max_num_seqs and "
                       f"memory.max_concurrency) where SGLang runs {theirs}{by(mine, theirs, 'seqs')} "
                       f"({sglang.get('message') or 'no cap message'}) [{source}]")
    return verdict(check, obs, PASS, f"memory admits {mine} sequences >= SGLang's {theirs} [{source}]")


ROWS: tuple[CheckSpec, ...] = (
    golden_row("budget"),
    CheckSpec("budget.parity_with_vllm", "budget", (UNDER_TEST,), budget_parity_with_vllm,
              "a budget field or the status differs from vLLM's (the message names the field, both values, the "
              "difference)", against="vllm",
              reads=("status",) + tuple(f"budget.{f}" for f in BUDGET_FIELDS)),
    CheckSpec("budget.active_seqs_not_below_sglang", "budget", (UNDER_TEST,), active_seqs_not_below_sglang,
              "memory admits fewer sequences than SGLang runs", against="sglang",
              reads=("budget.max_num_seqs", "memory.max_concurrency", "budget.max_active_seqs")),
)
