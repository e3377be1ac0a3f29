"""Parity verdicts: the suites' pass criteria (suites/*/README.md) as pure functions.

Contract: every check takes observation-shaped documents (a live observation, or a golden, which
carries the same top-level sections) and the case spec, and returns one `Verdict`
(`pass` | `fail` | `skip`, with a message and one line per difference). Nothing here reads a
file or imports pytest: the caller supplies the other engine's document (its golden, or its
live observation when no golden exists) and says which in `source`. `CHECKS` lists which check
applies to which engine and cases, the way the suites' `engines` / `cases` marks do.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any, Callable

from conformance.diff import Difference, json_diff
from conformance.goldens import golden_view

BUDGET_FIELDS = ("max_num_batched_tokens", "max_num_scheduled_tokens", "drafting_slots_per_request",
                 "lookahead_tokens", "max_num_seqs", "max_active_seqs")
POOL_CATEGORIES = ("attention_kv", "recurrent_state", "draft_kv")
STEP_FIELDS = ("total_num_scheduled_tokens", "num_scheduled_requests", "num_spec_tokens", "num_preempted")
# Which top-level sections each suite records in its goldens.
SUITE_SECTIONS: dict[str, tuple[str, ...]] = {"budget": ("budget",), "memory": ("memory",), "trace": ("trace",)}
MAX_DETAIL_LINES = 40

PASS, FAIL, SKIP = "pass", "fail", "skip"
MISSING_GOLDEN = "missing-golden"


@dataclass(frozen=True)
class Verdict:
    check: str                      # "<suite>.<check>", e.g. "budget.parity_with_vllm"
    engine: str
    case_id: str
    outcome: str                    # pass | fail | skip
    message: str = ""
    details: tuple[str, ...] = field(default=())
    cause: str = ""                 # why it failed, where a caller may group: "missing-golden"

    @property
    def failed(self) -> bool:
        return self.outcome == FAIL

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "engine": self.engine, "case_id": self.case_id, "outcome": self.outcome,
                "message": self.message, "details": list(self.details), "cause": self.cause}


def _v(check: str, obs: dict[str, Any], outcome: str, message: str = "",
       diffs: list[Difference] | tuple[str, ...] = ()) -> Verdict:
    lines = tuple(str(d) for d in diffs)
    if len(lines) > MAX_DETAIL_LINES:
        lines = lines[:MAX_DETAIL_LINES] + (f"... and {len(lines) - MAX_DETAIL_LINES} more",)
    return Verdict(check, obs["engine"]["name"], obs["case_id"], outcome, message, lines)


def _name(doc: dict[str, Any]) -> str:
    e = doc.get("engine") or {}
    return f"{e.get('name', '?')} {e.get('version', '?')}"


def _intended(case_spec: dict[str, Any], engine: str, field_name: str) -> dict[str, Any] | None:
    """The case's `intended_differences` entry for (engine, field), if it declares one."""
    for d in case_spec.get("intended_differences", []):
        if d["engine"] == engine and d["field"] in (field_name, f"budget.{field_name}"):
            return d
    return None


def _value_at(doc: dict[str, Any], dotted: str) -> Any:
    node: Any = doc
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


# --- every suite: the live observation against its own golden -------------------------------------

def matches_golden(suite: str, obs: dict[str, Any], golden: dict[str, Any] | None, source: str,
                   missing_reason: str = "") -> Verdict:
    """`<suite>.golden`: the suite's view of `obs` equals the recorded golden; another engine
    version, device profile or schema fails with a message saying so; no golden fails."""
    check = f"{suite}.golden"
    if golden is None:
        v = _v(check, obs, FAIL, missing_reason or f"no {obs['engine']['name']} golden for {obs['case_id']}")
        return Verdict(v.check, v.engine, v.case_id, v.outcome, v.message, v.details, MISSING_GOLDEN)
    view = golden_view(obs, SUITE_SECTIONS[suite])
    ge, ve = golden.get("engine", {}), view["engine"]
    if ge.get("version") != ve.get("version"):
        return _v(check, obs, FAIL, f"{source}: golden recorded with {_name(golden)}, but the live oracle is "
                  f"{_name(view)}: re-record it for this version (--snapshot-update) or restore the pin")
    if golden.get("device_profile") != view.get("device_profile"):
        return _v(check, obs, FAIL, f"{source}: golden recorded on device profile {golden.get('device_profile')!r},"
                  f" live is {view.get('device_profile')!r}")
    if golden.get("schema_version") != view.get("schema_version"):
        return _v(check, obs, FAIL, f"{source}: golden has observation schema {golden.get('schema_version')!r}, "
                  f"live has {view.get('schema_version')!r}: re-record with --snapshot-update")
    diffs = json_diff(golden, view)
    if diffs:
        return _v(check, obs, FAIL, f"{_name(view)} on {obs['case_id']} differs from its golden {source} "
                  f"({len(diffs)} field(s)); if upstream moved on purpose, re-record with --snapshot-update", diffs)
    return _v(check, obs, PASS, f"equals its golden {source}")


# --- budget suite -------------------------------------------------------------------------------

def budget_parity_with_vllm(obs: dict[str, Any], vllm: dict[str, Any], case_spec: dict[str, Any],
                            source: str) -> Verdict:
    """Same status as vLLM, and every budget field equal, unless the case declares the difference
    (`intended_differences`): then the engine's value must be the entry's `expected`, and for a
    status difference vLLM's status must still differ (a stale entry fails)."""
    check = "budget.parity_with_vllm"
    documented = _intended(case_spec, "vllm", "status")
    if documented:
        if obs["status"] != documented["expected"]:
            return _v(check, obs, FAIL, f"the case documents status {documented['expected']!r} "
                      f"({documented['reason']}), but {obs['engine']['name']} says {obs['status']} [{source}]")
        if vllm["status"] == obs["status"]:
            return _v(check, obs, FAIL, f"the case documents a status difference from vLLM that no longer exists: "
                      f"both say {obs['status']} [{source}]")
        return _v(check, obs, PASS, f"documented difference: vLLM {vllm['status']}, {obs['engine']['name']} "
                  f"{obs['status']} ({documented['reason']}) [{source}]")
    if obs["status"] != vllm["status"]:
        return _v(check, obs, FAIL, f"vLLM says {vllm['status']} ({vllm.get('message')}), {obs['engine']['name']} "
                  f"says {obs['status']} ({obs.get('message')}) [{source}]")
    if vllm["status"] != "ok":
        return _v(check, obs, PASS, f"both {vllm['status']} [{source}]")
    problems: list[Any] = []
    for d in json_diff({f: vllm["budget"][f] for f in BUDGET_FIELDS}, {f: obs["budget"][f] for f in BUDGET_FIELDS}):
        entry = _intended(case_spec, "vllm", d.path)
        if entry is None:
            problems.append(d)
        elif d.actual != entry["expected"]:
            problems.append(f"budget.{d.path}: the case documents {entry['expected']!r} ({entry['reason']}), "
                            f"got {d.actual!r}")
    if problems:
        return _v(check, obs, FAIL, f"budget differs from {_name(vllm)} on {obs['case_id']} [{source}]", problems)
    return _v(check, obs, PASS, f"every budget field equals {_name(vllm)} [{source}]")


def memory_admitted_seqs(obs: dict[str, Any]) -> int | None:
    """How many sequences an engine's memory plan admits at once: max_num_seqs, capped by the
    full-length sequences the pool seats. (A per-step token budget cap, vLLM's
    max_num_batched_tokens // lookahead, is not part of it: SGLang has no such budget.)"""
    seats = (obs.get("memory") or {}).get("max_concurrency")
    asked = (obs.get("budget") or {}).get("max_num_seqs")
    if seats is None or asked is None:
        return None
    return min(int(asked), int(seats))


def active_seqs_not_below_sglang(obs: dict[str, Any], sglang: dict[str, Any], case_spec: dict[str, Any],
                                 source: str) -> Verdict:
    """The comparable quantity with SGLang is concurrency as memory admits it: the engine's
    `memory_admitted_seqs` is never below SGLang's `max_active_seqs` (max_running_requests after
    SGLang's memory caps, e.g. its mamba state cache), unless the case documents the difference
    (`intended_differences`, engine sglang, field max_active_seqs): then the engine's figure must be
    the entry's `expected` and SGLang's must still be higher."""
    check = "budget.active_seqs_not_below_sglang"
    if sglang["status"] != "ok" or obs["status"] != "ok":
        return _v(check, obs, SKIP, f"SGLang {sglang['status']}, {obs['engine']['name']} {obs['status']}: "
                  f"nothing comparable [{source}]")
    mine, theirs = memory_admitted_seqs(obs), sglang["budget"]["max_active_seqs"]
    documented = _intended(case_spec, "sglang", "max_active_seqs")
    if documented:
        if mine != documented["expected"] or theirs is None or theirs <= mine:
            return _v(check, obs, FAIL, f"the case documents {obs['engine']['name']} admitting "
                      f"{documented['expected']} below SGLang ({documented['reason']}); now it admits {mine} and "
                      f"SGLang runs {theirs} [{source}]")
        return _v(check, obs, PASS, f"documented difference: memory admits {mine}, SGLang runs {theirs} "
                  f"({documented['reason']}) [{source}]")
    if mine is None or theirs is None or mine < theirs:
        return _v(check, obs, FAIL, f"{obs['engine']['name']}'s memory admits {mine} sequences where SGLang runs "
                  f"{theirs} ({sglang.get('message') or 'no cap message'}) [{source}]")
    return _v(check, obs, PASS, f"memory admits {mine} sequences >= SGLang's {theirs} [{source}]")


# --- memory suite -------------------------------------------------------------------------------

def bounded_bytes(memory: dict[str, Any], case_spec: dict[str, Any]) -> tuple[int, tuple[str, ...]]:
    """The bytes the operator's bound must cover, and the categories counted: the pool's categories
    for a KV-bytes bound; every category (weights, activations too) for gpu_memory_utilization."""
    ledger = memory["ledger_bytes"]
    cats = tuple(ledger) if "gpu_memory_utilization" in case_spec["memory"] else POOL_CATEGORIES
    return sum(ledger.get(c) or 0 for c in cats), cats


def inside_the_bound(obs: dict[str, Any], case_spec: dict[str, Any]) -> Verdict:
    check = "memory.inside_bound"
    if obs["status"] != "ok":
        return _v(check, obs, SKIP, f"{obs['status']}: {obs.get('message')}")
    mem = obs["memory"]
    if mem["outside_bound"]:
        return _v(check, obs, FAIL, f"allocations outside the operator's bound: {', '.join(mem['outside_bound'])}")
    total, _ = bounded_bytes(mem, case_spec)
    bound = mem["bound_bytes"]
    if bound is None or total > bound:
        over = "" if bound is None else f" by {total - bound} B"
        return _v(check, obs, FAIL, f"ledger {total} B exceeds the bound {bound} B{over}: {mem['ledger_bytes']}")
    return _v(check, obs, PASS, f"ledger {total} B within the bound {bound} B")


def seats_not_below_vllm(obs: dict[str, Any], vllm: dict[str, Any], source: str) -> Verdict:
    check = "memory.seats_not_below_vllm"
    if vllm["status"] != "ok":
        return _v(check, obs, SKIP, f"vLLM {vllm['status']}: {vllm.get('message')} [{source}]")
    if obs["status"] != "ok":
        return _v(check, obs, SKIP, f"{obs['status']}: {obs.get('message')}")
    mine, theirs = obs["memory"]["max_concurrency"], vllm["memory"]["max_concurrency"]
    if mine is None or theirs is None or mine < theirs:
        return _v(check, obs, FAIL, f"{obs['engine']['name']} seats {mine} full-length sequences where vLLM seats "
                  f"{theirs} in the same bytes [{source}]")
    return _v(check, obs, PASS, f"seats {mine} >= vLLM's {theirs} [{source}]")


def unified_pool_seats(obs: dict[str, Any], vllm: dict[str, Any], num_seqs: int, source: str) -> Verdict:
    """Where vLLM plans room for `num_seqs` concurrent full-length sequences, the engine seats them
    in the same bytes from one unified pool (bug 2)."""
    check = "memory.unified_pool_seats"
    if vllm["status"] != "ok" or (vllm["memory"]["max_concurrency"] or 0) < num_seqs:
        return _v(check, obs, FAIL, f"the case is meant to give vLLM room for {num_seqs} full-length sequences; "
                  f"vLLM: {vllm['status']} {(vllm.get('memory') or {}).get('max_concurrency')} [{source}]")
    if obs["status"] != "ok":
        return _v(check, obs, FAIL, f"{obs['engine']['name']} {obs['status']}: {obs.get('message')}")
    mem, budget = obs["memory"], obs["budget"]
    problems = []
    if mem["pool"]["unified"] is not True:
        problems.append(f"memory.pool.unified is {mem['pool']['unified']!r}, not one allocation")
    if (budget["max_active_seqs"] or 0) < num_seqs:
        problems.append(f"budget.max_active_seqs {budget['max_active_seqs']} < {num_seqs}")
    if (mem["max_concurrency"] or 0) < num_seqs:
        problems.append(f"memory.max_concurrency {mem['max_concurrency']} < {num_seqs}")
    if problems:
        return _v(check, obs, FAIL, f"does not seat {num_seqs} where vLLM does [{source}]", tuple(problems))
    return _v(check, obs, PASS, f"seats {mem['max_concurrency']} >= {num_seqs} in one unified pool [{source}]")


def explains_short_seats(obs: dict[str, Any]) -> Verdict:
    """At a bound too small for max_num_seqs full-length sequences, the engine still plans and says
    how many it seats and why: its message states `seats N` with N < max_num_seqs and N within the
    pool's max_concurrency."""
    import re

    check = "memory.explains_short_seats"
    if obs["status"] != "ok":
        return _v(check, obs, SKIP, f"{obs['status']}: {obs.get('message')}")
    seats, asked = obs["memory"]["max_concurrency"], obs["budget"]["max_num_seqs"]
    if seats is None or asked is None or seats >= asked:
        return _v(check, obs, SKIP, f"the pool holds max_num_seqs {asked} full-length sequences ({seats})")
    m = re.search(r"seats (\d+) full-length", obs.get("message") or "")
    if not m:
        return _v(check, obs, FAIL, f"the pool holds {seats:.2f} full-length sequences of max_num_seqs {asked}, but "
                  f"the observation does not say how many it seats: {obs.get('message')!r}")
    n = int(m.group(1))
    if not (n < asked and n <= seats):
        return _v(check, obs, FAIL, f"says it seats {n}, inconsistent with max_concurrency {seats} / max_num_seqs {asked}")
    return _v(check, obs, PASS, obs["message"])


def draft_kv_scaling(small: dict[str, Any], large: dict[str, Any]) -> Verdict:
    """Bug 1: in both observations draft KV is inside the bound, a full-length sequence's draft KV
    is the same, and `max_num_seqs` full-length sequences -- their draft KV included, which grows
    with max_num_seqs -- fit inside the bound."""
    check = "memory.draft_kv_scaling"
    for o in (small, large):
        if o["status"] != "ok":
            return _v(check, small, SKIP, f"{o['case_id']}: {o['status']}: {o.get('message')}")
    problems = [f"{o['case_id']}: draft KV outside the bound" for o in (small, large)
                if "draft_kv" in o["memory"]["outside_bound"]]
    per_s, per_l = (o["memory"]["per_sequence"]["draft_kv_bytes"] for o in (small, large))
    seqs_s, seqs_l = (o["budget"]["max_num_seqs"] for o in (small, large))
    if not per_s or per_s != per_l:
        problems.append(f"a full-length sequence's draft KV differs: {per_s} vs {per_l}")
    if not seqs_l > seqs_s:
        problems.append(f"max_num_seqs does not grow: {seqs_s} -> {seqs_l}")
    figures = []
    for o in (small, large):
        per = o["memory"]["per_sequence"]
        seqs = o["budget"]["max_num_seqs"]
        need = seqs * sum(per[k] or 0 for k in ("attention_kv_bytes", "recurrent_state_bytes", "draft_kv_bytes"))
        figures.append(f"{seqs} seqs: draft KV {seqs * (per['draft_kv_bytes'] or 0)} B, "
                       f"all per-sequence state {need} B of the bound {o['memory']['bound_bytes']} B")
        if o["memory"]["bound_bytes"] is None or need > o["memory"]["bound_bytes"]:
            problems.append(f"{o['case_id']}: {seqs} full-length sequences need {need} B, over the bound")
    if problems:
        return _v(check, small, FAIL, "draft KV does not scale inside the bound", tuple(problems + figures))
    return _v(check, small, PASS, "; ".join(figures), tuple(figures))


# --- trace suite --------------------------------------------------------------------------------

def steps_within_budget(obs: dict[str, Any]) -> Verdict:
    check = "trace.steps_within_budget"
    if obs["status"] != "ok" or not obs.get("trace"):
        return _v(check, obs, SKIP, f"{obs['status']}: no trace ({obs.get('message')})")
    budget, steps = obs["budget"], obs["trace"]["steps"]
    if not steps:
        return _v(check, obs, FAIL, "an ok trace has at least one step")
    over = [f"step {i}: {s['total_num_scheduled_tokens']} tokens > max_num_scheduled_tokens "
            f"{budget['max_num_scheduled_tokens']}" for i, s in enumerate(steps)
            if budget["max_num_scheduled_tokens"] is not None
            and s["total_num_scheduled_tokens"] > budget["max_num_scheduled_tokens"]]
    crowded = [f"step {i}: {s['num_scheduled_requests']} requests > max_active_seqs {budget['max_active_seqs']}"
               for i, s in enumerate(steps)
               if budget["max_active_seqs"] is not None and s["num_scheduled_requests"] > budget["max_active_seqs"]]
    if over or crowded:
        return _v(check, obs, FAIL, f"{len(over)} step(s) over the token budget, {len(crowded)} over the "
                  f"active-sequence cap", tuple(over + crowded))
    return _v(check, obs, PASS, f"{len(steps)} steps within the budget")


TRACE_DIFFERENCES = ("equal_until_first_preemption",)


def trace_equals_vllm(obs: dict[str, Any], vllm: dict[str, Any], case_spec: dict[str, Any], source: str) -> Verdict:
    """Step for step equal to vLLM on the four counted fields. A case may document a trace
    difference (`intended_differences` field `trace`) with `expected` one of TRACE_DIFFERENCES:
    `equal_until_first_preemption` checks equality through vLLM's first preempting step, and that
    the traces do differ after it (a stale entry fails)."""
    check = "trace.equals_vllm"
    if vllm["status"] != "ok":
        return _v(check, obs, SKIP, f"vLLM {vllm['status']}: {vllm.get('message')} [{source}]")
    if obs["status"] != "ok" or not obs.get("trace"):
        return _v(check, obs, FAIL, f"{obs['status']}: {obs.get('message')}")
    mine = [{f: s[f] for f in STEP_FIELDS} for s in obs["trace"]["steps"]]
    theirs = [{f: s[f] for f in STEP_FIELDS} for s in (vllm.get("trace") or {}).get("steps", [])]
    first = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), None)
    if first is None and len(mine) != len(theirs):
        first = min(len(mine), len(theirs))
    documented = next((d for d in case_spec.get("intended_differences", [])
                       if d["engine"] == "vllm" and d["field"] == "trace"), None)
    if documented:
        if documented["expected"] not in TRACE_DIFFERENCES:
            return _v(check, obs, FAIL, f"unknown documented trace difference {documented['expected']!r} "
                      f"(known: {', '.join(TRACE_DIFFERENCES)})")
        preempt = next((i for i, s in enumerate(theirs) if s["num_preempted"] > 0), None)
        if preempt is None:
            return _v(check, obs, FAIL, f"documented difference {documented['expected']} but vLLM never preempts "
                      f"[{source}]")
        if first is not None and first <= preempt:
            return _v(check, obs, FAIL, f"traces differ at step {first}, before vLLM's first preemption at step "
                      f"{preempt} [{source}]", (f"{obs['engine']['name']}: {mine[first] if first < len(mine) else None}",
                                                f"vllm: {theirs[first] if first < len(theirs) else None}"))
        if first is None:
            return _v(check, obs, FAIL, f"the case documents a trace difference after vLLM's preemption that no "
                      f"longer exists: the traces are equal [{source}]")
        return _v(check, obs, PASS, f"equal through vLLM's first preemption (step {preempt}), then differ from step "
                  f"{first} as documented: {documented['reason']} [{source}]")
    if first is not None:
        return _v(check, obs, FAIL, f"trace differs from {_name(vllm)} first at step {first} [{source}]",
                  (f"{obs['engine']['name']}: {mine[first] if first < len(mine) else '(ended)'}",
                   f"vllm: {theirs[first] if first < len(theirs) else '(ended)'}"))
    return _v(check, obs, PASS, f"{len(mine)} steps equal vLLM's [{source}]")


# --- which check applies where ------------------------------------------------------------------

@dataclass(frozen=True)
class CheckSpec:
    """A cross-engine check: applies to `engines` x cases matching `case_globs`; `against` names the
    engine whose document (golden of `suite`, else live) it compares with, or None."""

    name: str
    suite: str
    engines: tuple[str, ...]
    against: str | None
    run: Callable[..., Verdict]
    case_globs: tuple[str, ...] = ("*",)

    def applies(self, engine: str, case_id: str) -> bool:
        return engine in self.engines and any(fnmatch.fnmatchcase(case_id, g) for g in self.case_globs)


CHECKS: tuple[CheckSpec, ...] = (
    CheckSpec("budget.parity_with_vllm", "budget", ("reference",), "vllm",
              lambda obs, other, spec, src: budget_parity_with_vllm(obs, other, spec, src)),
    CheckSpec("budget.active_seqs_not_below_sglang", "budget", ("reference",), "sglang",
              lambda obs, other, spec, src: active_seqs_not_below_sglang(obs, other, spec, src)),
    CheckSpec("memory.inside_bound", "memory", ("reference",), None,
              lambda obs, other, spec, src: inside_the_bound(obs, spec)),
    CheckSpec("memory.seats_not_below_vllm", "memory", ("reference",), "vllm",
              lambda obs, other, spec, src: seats_not_below_vllm(obs, other, src)),
    CheckSpec("memory.unified_pool_seats", "memory", ("reference",), "vllm",
              lambda obs, other, spec, src: unified_pool_seats(obs, other, 32, src), ("seed-unified-pool-c32-k8",)),
    CheckSpec("memory.explains_short_seats", "memory", ("reference",), None,
              lambda obs, other, spec, src: explains_short_seats(obs)),
    CheckSpec("trace.steps_within_budget", "trace", ("reference", "vllm"), None,
              lambda obs, other, spec, src: steps_within_budget(obs)),
    CheckSpec("trace.equals_vllm", "trace", ("reference",), "vllm",
              lambda obs, other, spec, src: trace_equals_vllm(obs, other, spec, src), ("tiny-*",)),
)
