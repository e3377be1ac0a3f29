"""Parity verdicts: the suites' pass criteria (suites/*/README.md) as pure functions.

Contract: every check takes observation-shaped documents (a live observation, or a golden, which
carries the same top-level sections) and the case spec, and returns one `Verdict`
(`pass` | `fail` | `skip`, with a message and one line per difference). Nothing here reads a
file, imports pytest or knows an engine by name: the caller (`conformance.check_table`) supplies
the oracle's document (its golden, or its live observation when no golden exists) and says which
in `source`. A failing message says what differs, by how much (bytes, tokens, seats), what the
oracle does, and which observation field it read.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from conformance import units
from conformance.diff import Difference, json_diff
from conformance.golden_doc import golden_view
from conformance.memory_facts import UNKNOWN, draft_kv_location, pool_differences

BUDGET_FIELDS = ("max_num_batched_tokens", "max_num_scheduled_tokens", "drafting_slots_per_request",
                 "lookahead_tokens", "max_num_seqs", "max_active_seqs")
POOL_CATEGORIES = ("attention_kv", "recurrent_state", "draft_kv")
PER_SEQUENCE_FIELDS = ("attention_kv_bytes", "recurrent_state_bytes", "draft_kv_bytes", "state_slots")
# Ledger categories a KV-bytes bound does not cover (a gpu_memory_utilization bound covers them).
NOT_UNDER_KV_BOUND = ("weights", "activations", "workspace", "cuda_context", "cuda_graphs")
STEP_FIELDS = ("total_num_scheduled_tokens", "num_scheduled_requests", "num_spec_tokens", "num_preempted")
# Which top-level sections each suite records in its goldens.
SUITE_SECTIONS: dict[str, tuple[str, ...]] = {"budget": ("budget",), "memory": ("memory",), "trace": ("trace",)}
SEATS_REL_TOLERANCE = 0.005   # max_concurrency may differ from vLLM's by 0.5% (float rounding of pages)
MAX_DETAIL_LINES = 40
MIN_CONCURRENCY_SAMPLES = 5   # samples of the running-requests gauge a rung needs before its maximum means anything

PASS, FAIL, SKIP = "pass", "fail", "skip"
# Live outcomes: a timing comparison whose interval straddles its band's limit says neither pass nor fail;
# an oracle measured breaking its own definition (vLLM over its own bound) is a finding about the
# oracle, shown as such, not a failure of the run.
INCONCLUSIVE, FINDING = "inconclusive", "finding"
MISSING_GOLDEN = "missing-golden"


@dataclass(frozen=True)
class Verdict:
    check: str                      # "<suite>.<check>", e.g. "budget.parity_with_vllm"
    engine: str
    case_id: str
    outcome: str                    # pass | fail | skip | inconclusive | finding
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
       diffs: list[Any] | tuple[str, ...] = (), cause: str = "") -> Verdict:
    lines = tuple(str(d) for d in diffs)
    if len(lines) > MAX_DETAIL_LINES:
        lines = lines[:MAX_DETAIL_LINES] + (f"... and {len(lines) - MAX_DETAIL_LINES} more",)
    return Verdict(check, obs["engine"]["name"], obs["case_id"], outcome, message, lines, cause)


def _name(doc: dict[str, Any]) -> str:
    e = doc.get("engine") or {}
    return f"{e.get('name', '?')} {e.get('version', '?')}"


def human_bytes(n: float | None) -> str:
    return units.human_bytes(n, none="null")


def _by(mine: Any, theirs: Any, unit: str) -> str:
    """`(+16 tokens)`: how far `mine` is from `theirs`, where both are numbers."""
    if isinstance(mine, (int, float)) and isinstance(theirs, (int, float)) and not isinstance(mine, bool):
        d = mine - theirs
        if unit == "bytes":
            return f" ({'+' if d >= 0 else '-'}{human_bytes(abs(d))}, {d:+d} B)" if isinstance(d, int) else f" ({d:+.3f} B)"
        return f" ({d:+g} {unit})"
    return ""


def null_fields(section: str, doc: dict[str, Any] | None, names: tuple[str, ...] | list[str]) -> list[str]:
    """The dotted paths (`memory.ledger_bytes.draft_kv`) of `names` in `doc` that are null or absent:
    figures the engine did not report. A check that needs one fails naming it, never reading it as 0."""
    doc = doc if isinstance(doc, dict) else {}
    return [f"{section}.{n}" for n in names if doc.get(n) is None]


def _not_reported(paths: list[str]) -> str:
    return (f"{', '.join(paths)} {'is' if len(paths) == 1 else 'are'} null: the engine did not report "
            f"{'it' if len(paths) == 1 else 'them'}, and this check needs {'it' if len(paths) == 1 else 'them'}")


EVERY_ENGINE = "*"


def _intended(case_spec: dict[str, Any], oracle: str, field_name: str, engine: str) -> dict[str, Any] | None:
    """The case's `intended_differences` entry for (oracle, field) that documents `engine` (named in
    the entry's `engines`, or `*` there: every engine under test), if it declares one. An entry of
    another engine never binds this one: it is judged by the check's own rule."""
    for d in case_spec.get("intended_differences", []):
        if (d["oracle"] == oracle and d["field"] in (field_name, f"budget.{field_name}")
                and (engine in d["engines"] or EVERY_ENGINE in d["engines"])):
            return d
    return None


def _whom(entry: dict[str, Any], engine: str) -> str:
    """How a documented difference names the engine it binds: `every engine under test (X)` or `X`."""
    return f"every engine under test ({engine})" if EVERY_ENGINE in entry["engines"] else engine


def documents_status_difference(case_spec: dict[str, Any], oracle: str, engine: str) -> bool:
    return _intended(case_spec, oracle, "status", engine) is not None


# --- every suite: an observation against its own golden -------------------------------------------

def golden_verdict(suite: str, obs: dict[str, Any], golden: dict[str, Any] | None, source: str,
                   is_oracle: bool, missing_reason: str = "") -> Verdict:
    """`<suite>.golden`: the suite's view of `obs` equals its recorded golden. Another engine
    version, device profile or schema fails with a message saying so. With no golden, an oracle
    fails (did upstream move? nobody can tell); an engine under test is skipped: it is judged
    against the oracles, and its own golden is regression protection only."""
    check = f"{suite}.golden"
    if golden is None:
        if is_oracle:
            return _v(check, obs, FAIL, missing_reason or f"no golden of the oracle {obs['engine']['name']} for "
                      f"{obs['case_id']}", cause=MISSING_GOLDEN)
        return _v(check, obs, SKIP, f"no regression golden of {obs['engine']['name']} for {obs['case_id']} "
                  f"(optional: an engine under test is judged against the oracles' numbers, not its own)")
    view = golden_view(obs, SUITE_SECTIONS[suite])
    ge, ve = golden.get("engine") or {}, view["engine"]
    if ge.get("version") != ve.get("version"):
        return _v(check, obs, FAIL, f"{source}: golden recorded with {_name(golden)}, but the live engine is "
                  f"{_name(view)}: re-record it for this version (--snapshot-update) or restore the pin")
    if golden.get("device_profile") != view.get("device_profile"):
        return _v(check, obs, FAIL, f"{source}: golden recorded on device profile {golden.get('device_profile')!r},"
                  f" live is {view.get('device_profile')!r}")
    if golden.get("schema_version") != view.get("schema_version"):
        return _v(check, obs, FAIL, f"{source}: golden has observation schema {golden.get('schema_version')!r}, "
                  f"live has {view.get('schema_version')!r}: re-record with --snapshot-update")
    diffs = json_diff(golden, view)
    if diffs:
        advice = ("if upstream moved on purpose, re-record with --snapshot-update" if is_oracle else
                  "a regression of the engine under test, unless the change is intended (then re-record)")
        return _v(check, obs, FAIL, f"{_name(view)} on {obs['case_id']} differs from its golden {source} "
                  f"({len(diffs)} field(s)); {advice}", diffs)
    return _v(check, obs, PASS, f"equals its golden {source}")


# --- budget suite -------------------------------------------------------------------------------

def budget_parity_with_vllm(obs: dict[str, Any], vllm: dict[str, Any], case_spec: dict[str, Any],
                            source: str) -> Verdict:
    """Same status as vLLM, and every budget field equal, unless the case declares the difference
    (`intended_differences`, oracle vllm) for this engine (named in the entry's `engines`, or `*`):
    then the engine's value must be the entry's `expected`, and for a status difference vLLM's
    status must still differ (a stale entry fails). An entry of another engine does not apply."""
    check = "budget.parity_with_vllm"
    me = obs["engine"]["name"]
    documented = _intended(case_spec, "vllm", "status", me)
    if documented:
        if obs["status"] != documented["expected"]:
            return _v(check, obs, FAIL, f"the case documents status {documented['expected']!r} for "
                      f"{_whom(documented, me)} ({documented['reason']}), but {me} says {obs['status']}: "
                      f"{obs.get('message')} [{source}]")
        if vllm["status"] == obs["status"]:
            return _v(check, obs, FAIL, f"the case documents a status difference from vLLM that no longer exists: "
                      f"both say {obs['status']} [{source}]")
        return _v(check, obs, PASS, f"documented difference: vLLM {vllm['status']}, {me} "
                  f"{obs['status']} ({documented['reason']}) [{source}]")
    if obs["status"] != vllm["status"]:
        return _v(check, obs, FAIL, f"status: vLLM says {vllm['status']} ({vllm.get('message') or 'no message'}), "
                  f"{me} says {obs['status']} ({obs.get('message') or 'no message'}) [{source}]")
    if vllm["status"] != "ok":
        return _v(check, obs, PASS, f"both {vllm['status']} [{source}]")
    mine_b, theirs_b = obs.get("budget") or {}, vllm.get("budget") or {}
    problems: list[str] = []
    for d in json_diff({f: theirs_b.get(f) for f in BUDGET_FIELDS}, {f: mine_b.get(f) for f in BUDGET_FIELDS}):
        entry = _intended(case_spec, "vllm", d.path, me)
        unit = "seqs" if "seqs" in d.path else ("slots" if "slots" in d.path else "tokens")
        if entry is None:
            problems.append(f"budget.{d.path}: vLLM {d.expected!r}, {me} {d.actual!r}{_by(d.actual, d.expected, unit)}")
        elif d.actual != entry["expected"]:
            problems.append(f"budget.{d.path}: the case documents {entry['expected']!r} for {_whom(entry, me)} "
                            f"({entry['reason']}), {me} has {d.actual!r}")
    if problems:
        return _v(check, obs, FAIL, f"{len(problems)} budget field(s) differ from {_name(vllm)} on {obs['case_id']}: "
                  f"{problems[0]} [{source}]", problems)
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
    (`intended_differences`, oracle sglang, field max_active_seqs, `engines` naming this engine or
    `*`): then the engine's figure must be the entry's `expected` and SGLang's must still be higher.
    An entry of another engine does not apply: this engine is judged by the rule."""
    check = "budget.active_seqs_not_below_sglang"
    me = obs["engine"]["name"]
    if sglang["status"] != "ok" or obs["status"] != "ok":
        return _v(check, obs, SKIP, f"SGLang {sglang['status']}, {me} {obs['status']}: nothing comparable [{source}]")
    mine, theirs = memory_admitted_seqs(obs), (sglang.get("budget") or {}).get("max_active_seqs")
    documented = _intended(case_spec, "sglang", "max_active_seqs", me)
    if documented:
        if mine != documented["expected"] or theirs is None or theirs <= mine:
            return _v(check, obs, FAIL, f"the case documents {_whom(documented, me)} admitting "
                      f"{documented['expected']} below SGLang "
                      f"({documented['reason']}); now it admits {mine} and SGLang runs {theirs} [{source}]")
        return _v(check, obs, PASS, f"documented difference: memory admits {mine}, SGLang runs {theirs} "
                  f"({documented['reason']}) [{source}]")
    if mine is None or theirs is None or mine < theirs:
        return _v(check, obs, FAIL, f"{me}'s memory admits {mine} sequences (min of budget.max_num_seqs and "
                  f"memory.max_concurrency) where SGLang runs {theirs}{_by(mine, theirs, 'seqs')} "
                  f"({sglang.get('message') or 'no cap message'}) [{source}]")
    return _v(check, obs, PASS, f"memory admits {mine} sequences >= SGLang's {theirs} [{source}]")


# --- memory suite -------------------------------------------------------------------------------

def bounded_bytes(memory: dict[str, Any], case_spec: dict[str, Any]) -> tuple[int, tuple[str, ...]]:
    """The bytes the operator's bound must cover, and the categories counted: every category the
    pool holds (all but weights / activations / workspace / CUDA context) for a KV-bytes bound;
    every category for gpu_memory_utilization. Categories listed outside the bound count too: the
    bound must cover them, whatever the engine says."""
    ledger = memory.get("ledger_bytes") or {}
    every = "gpu_memory_utilization" in case_spec["memory"]
    cats = tuple(c for c in ledger if every or c not in NOT_UNDER_KV_BOUND)
    return sum(ledger.get(c) or 0 for c in cats), cats


def _unplaced_draft_kv(obs: dict[str, Any], case_spec: dict[str, Any]) -> list[str]:
    """One problem line when a plan does not say where its draft KV lives, else none."""
    where, why = draft_kv_location(obs, case_spec)
    return [f"draft KV: {why}"] if where == UNKNOWN else []


def _draft_kv_says_first(obs: dict[str, Any], unplaced: list[str]) -> bool:
    """Which failure a bound check states first when both apply: where the draft KV lives, when the
    plan reports its draft KV bytes but not where they are (the null figures beside them are details);
    the null figures, when the draft KV figure is itself among them (its place cannot be asked)."""
    return bool(unplaced) and ((obs.get("memory") or {}).get("ledger_bytes") or {}).get("draft_kv") is not None


def inside_the_bound(obs: dict[str, Any], case_spec: dict[str, Any]) -> Verdict:
    """Nothing outside the operator's bound: `memory.outside_bound` is empty, the ledger's
    categories under the bound sum to at most `memory.bound_bytes`, and a DFlash plan says where its
    draft KV lives (`memory_facts.draft_kv_location`: a plan that does not cannot pass a bound check)."""
    check = "memory.inside_bound"
    if obs["status"] != "ok":
        return _v(check, obs, SKIP, f"{obs['status']}: {obs.get('message')}")
    mem = obs["memory"]
    ledger = mem.get("ledger_bytes") or {}
    bound = mem.get("bound_bytes")
    total, cats = bounded_bytes(mem, case_spec)
    unreported = null_fields("memory.ledger_bytes", ledger, list(cats) + [c for c in mem.get("outside_bound") or ()
                                                                         if c not in cats])
    unplaced = _unplaced_draft_kv(obs, case_spec)
    null_line = (f"{_not_reported(unreported)} (a category the bound must cover, summed against memory.bound_bytes "
                 f"{bound})") if unreported else ""
    if unreported and not _draft_kv_says_first(obs, unplaced):
        return _v(check, obs, FAIL, null_line, tuple(unreported) + tuple(unplaced))
    problems = unplaced + ([null_line] if null_line else [])
    if mem.get("outside_bound"):
        outside = sum(ledger.get(c) or 0 for c in mem["outside_bound"])
        parts = ", ".join(f"{c} {human_bytes(ledger.get(c))}" for c in mem["outside_bound"])
        problems.append(f"memory.outside_bound: {parts} ({outside} B) allocated beside the pool, not counted by the "
                        f"bound; vLLM draws every KV cache group from the one bounded allocation")
    if bound is None:
        problems.append("memory.bound_bytes is null: the engine did not say which bound it applied")
    elif total > bound:
        problems.append(f"memory.ledger_bytes ({', '.join(cats)}) sum to {total} B ({human_bytes(total)}), over "
                        f"memory.bound_bytes {bound} B ({human_bytes(bound)}) by {total - bound} B "
                        f"({human_bytes(total - bound)})")
    if problems:
        return _v(check, obs, FAIL, problems[0], problems)
    return _v(check, obs, PASS, f"ledger {total} B within the bound {bound} B")


def ledger_holds_seats(obs: dict[str, Any], case_spec: dict[str, Any]) -> Verdict:
    """What the engine says a sequence costs, times the sequences it seats, fits in what its
    ledger puts under the bound: `min(budget.max_num_seqs, floor(memory.max_concurrency))` x the
    sum of `memory.per_sequence` bytes <= the ledger's categories under the bound. An engine that
    keeps a per-request store (draft KV, say) out of its ledger fails here, from its own figures; so
    does a DFlash plan that does not say where its draft KV lives."""
    check = "memory.ledger_holds_seats"
    if obs["status"] != "ok":
        return _v(check, obs, SKIP, f"{obs['status']}: {obs.get('message')}")
    unplaced = _unplaced_draft_kv(obs, case_spec)
    if _draft_kv_says_first(obs, unplaced):
        return _v(check, obs, FAIL, f"cannot tell whether the ledger holds the seats: {unplaced[0]}", unplaced)
    mem = obs["memory"]
    per = mem.get("per_sequence") or {}
    seats_f, asked = mem.get("max_concurrency"), (obs.get("budget") or {}).get("max_num_seqs")
    if seats_f is None or asked is None:
        return _v(check, obs, FAIL, f"memory.max_concurrency {seats_f!r} / budget.max_num_seqs {asked!r}: the engine "
                  f"does not say how many sequences its pool seats")
    seats = min(int(asked), math.floor(seats_f))
    ledger = mem.get("ledger_bytes") or {}
    outside = set(mem.get("outside_bound") or ())
    _, held_cats = bounded_bytes({"ledger_bytes": {c: v for c, v in ledger.items() if c not in outside}}, case_spec)
    unreported = (null_fields("memory.per_sequence", per, ("attention_kv_bytes", "recurrent_state_bytes", "draft_kv_bytes"))
                  + null_fields("memory.ledger_bytes", ledger, held_cats))
    if unreported:
        return _v(check, obs, FAIL, f"{_not_reported(unreported)} (what a sequence costs and what the ledger holds "
                  f"under the bound, for {seats} seats)", tuple(unreported) + tuple(unplaced))
    if unplaced:
        return _v(check, obs, FAIL, f"cannot tell whether the ledger holds the seats: {unplaced[0]}", unplaced)
    per_seq = sum(per[k] for k in ("attention_kv_bytes", "recurrent_state_bytes", "draft_kv_bytes"))
    need = seats * per_seq
    held, _ = bounded_bytes({"ledger_bytes": {c: v for c, v in ledger.items() if c not in outside}}, case_spec)
    if need > held:
        lines = [f"{seats} seats x {per_seq} B per sequence (memory.per_sequence: attention {per.get('attention_kv_bytes')}"
                 f", state {per.get('recurrent_state_bytes')}, draft {per.get('draft_kv_bytes')}) = {need} B "
                 f"({human_bytes(need)})",
                 f"the ledger holds {held} B ({human_bytes(held)}) under the bound: {need - held} B "
                 f"({human_bytes(need - held)}) of what the seats need is not in the pool"]
        return _v(check, obs, FAIL, f"memory.ledger_bytes cannot hold the {seats} sequences memory.max_concurrency "
                  f"seats: short by {need - held} B ({human_bytes(need - held)}); a per-request store kept beside the "
                  f"pool would look like this (only a live check measures what is really allocated)", lines)
    return _v(check, obs, PASS, f"{seats} seats x {per_seq} B = {need} B within the {held} B the ledger holds")


def per_sequence_equals_vllm(obs: dict[str, Any], vllm: dict[str, Any], case_spec: dict[str, Any],
                             source: str) -> Verdict:
    """A full-length sequence costs what it costs in vLLM: `memory.per_sequence` attention KV,
    recurrent state and draft KV bytes and state slots equal vLLM's, exactly. A failure says whether
    the difference is one of accounting (a store vLLM counts that the engine leaves out of its ledger
    or keeps outside the bound) or of layout (block size, Mamba page padding, KV-cache group padding,
    each with vLLM's figure and deciding function from vLLM's document): `memory_facts.pool_differences`."""
    check = "memory.per_sequence_equals_vllm"
    me = obs["engine"]["name"]
    if vllm["status"] != "ok" or documents_status_difference(case_spec, "vllm", me):
        return _v(check, obs, SKIP, f"vLLM {vllm['status']}: {vllm.get('message')} [{source}]")
    if obs["status"] != "ok":
        return _v(check, obs, FAIL, f"{me} {obs['status']} where vLLM plans: {obs.get('message')} [{source}]")
    mine, theirs = obs["memory"].get("per_sequence") or {}, vllm["memory"].get("per_sequence") or {}
    problems = []
    for f in PER_SEQUENCE_FIELDS:
        if mine.get(f) != theirs.get(f):
            unit = "slots" if f == "state_slots" else "bytes"
            problems.append(f"memory.per_sequence.{f}: vLLM {theirs.get(f)!r}, {me} {mine.get(f)!r}"
                            f"{_by(mine.get(f), theirs.get(f), unit)}")
    if problems:
        why = pool_differences(obs, vllm)
        return _v(check, obs, FAIL, f"a full-length sequence costs other than in {_name(vllm)}: {problems[0]}"
                  f"{'; ' + why.summary() if why.kind else ''} [{source}]", problems + list(why.lines()))
    return _v(check, obs, PASS, f"per-sequence attention, state, draft bytes and state slots equal vLLM's [{source}]")


def _own_pools(obs: dict[str, Any], vllm: dict[str, Any], case_spec: dict[str, Any]) -> tuple[int, int] | None:
    """(engine's, vLLM's) pool bytes on a gpu_memory_utilization case, where each engine sizes its
    own pool from the device's memory less its own reserves; None on a byte-budget case (same bytes)."""
    if "gpu_memory_utilization" not in (case_spec.get("memory") or {}):
        return None
    mine = ((obs.get("memory") or {}).get("pool") or {}).get("size_bytes")
    theirs = ((vllm.get("memory") or {}).get("pool") or {}).get("size_bytes")
    return (mine, theirs) if mine and theirs else None


def _seats_close(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and abs(a - b) <= SEATS_REL_TOLERANCE * max(b, 1e-9)


def _seats_why(obs: dict[str, Any], vllm: dict[str, Any], mine: float | None, theirs: float | None,
               fewer: str) -> tuple[str, tuple[str, ...]]:
    """Why the seats differ, as the message's clause and detail lines: fewer seats (two pools, or
    padding vLLM does not take), or more, sorted into an accounting or a layout difference."""
    diffs = pool_differences(obs, vllm)
    if mine is not None and theirs is not None and mine < theirs:
        return f"fewer: {fewer} (two pools, or padding vLLM does not take?)", diffs.lines()
    if diffs.kind:
        return f"more: a sequence costs less than in vLLM, {diffs.summary()}", diffs.lines()
    return ("more: a sequence costs less than in vLLM, so something it needs is not counted in the seat count "
            "(neither a store missing from the ledger nor a layout difference from vLLM's shows in the figures)",
            diffs.lines())


def seats_equal_vllm(obs: dict[str, Any], vllm: dict[str, Any], case_spec: dict[str, Any], source: str) -> Verdict:
    """`memory.max_concurrency` equals vLLM's for the same bytes within SEATS_REL_TOLERANCE: fewer
    seats is the two-pool bug; more seats is an accounting difference (a store not in the ledger) or a
    layout difference (vLLM's block size, page or group padding not taken), and the message says
    which (`memory_facts.pool_differences`). A case
    may document a seat difference (`intended_differences`, oracle vllm, field
    memory.max_concurrency, `engines` naming the engine or `*`): then the engine's seats must be the entry's `expected` and vLLM's must
    still differ from them (a stale entry fails), both within the same tolerance. On a
    gpu_memory_utilization case each engine sizes its own pool: the engine's seats are compared with
    vLLM's seats per pool byte times the engine's pool bytes."""
    check = "memory.seats_equal_vllm"
    me = obs["engine"]["name"]
    if vllm["status"] != "ok" or documents_status_difference(case_spec, "vllm", me):
        return _v(check, obs, SKIP, f"vLLM {vllm['status']}: {vllm.get('message')} [{source}]")
    if obs["status"] != "ok":
        return _v(check, obs, FAIL, f"{me} {obs['status']} where vLLM seats {vllm['memory']['max_concurrency']}: "
                  f"{obs.get('message')} [{source}]")
    mine, theirs = obs["memory"].get("max_concurrency"), vllm["memory"].get("max_concurrency")
    documented = _intended(case_spec, "vllm", "memory.max_concurrency", me)
    if documented:
        if not _seats_close(mine, float(documented["expected"])):
            return _v(check, obs, FAIL, f"the case documents {_whom(documented, me)} seating {documented['expected']} "
                      f"where vLLM seats "
                      f"{theirs} ({documented['reason']}), but {me} seats {mine} [{source}]")
        if _seats_close(mine, theirs):
            return _v(check, obs, FAIL, f"the case documents a seat difference from vLLM that no longer exists: both "
                      f"seat {mine} [{source}]")
        return _v(check, obs, PASS, f"documented difference: {me} seats {mine}, vLLM {theirs} "
                  f"({documented['reason']}) [{source}]")
    pools = _own_pools(obs, vllm, case_spec)
    if pools is not None and theirs is not None:
        scaled = theirs * pools[0] / pools[1]
        where = (f"in its own pool of {human_bytes(pools[0])} where vLLM's seats per byte give {scaled:.6g} "
                 f"(vLLM seats {theirs} in {human_bytes(pools[1])}: each engine's reserves beside the pool are its own)")
        if not _seats_close(mine, scaled):
            why, lines = _seats_why(obs, vllm, mine, scaled, "its pool seats fewer full-length sequences per byte")
            return _v(check, obs, FAIL, f"memory.max_concurrency: {me} seats {mine} full-length sequences {where}"
                      f"{_by(mine, scaled, 'seats')}; {why} [{source}]", lines)
        return _v(check, obs, PASS, f"seats {mine} {where}, within {SEATS_REL_TOLERANCE:.1%} [{source}]")
    if not _seats_close(mine, theirs):
        why, lines = _seats_why(obs, vllm, mine, theirs, "the same bytes seat fewer full-length sequences")
        return _v(check, obs, FAIL, f"memory.max_concurrency: {me} seats {mine} full-length sequences where vLLM seats "
                  f"{theirs} in the same bytes{_by(mine, theirs, 'seats')}; {why} [{source}]", lines)
    return _v(check, obs, PASS, f"seats {mine} = vLLM's {theirs} (within {SEATS_REL_TOLERANCE:.1%}) [{source}]")


def unified_pool_seats(obs: dict[str, Any], vllm: dict[str, Any], case_spec: dict[str, Any], num_seqs: int,
                       source: str) -> Verdict:
    """Bug 2, judged on the outcome, not on a structure flag: where vLLM plans room for `num_seqs`
    concurrent full-length sequences, the engine seats them (memory.max_concurrency and
    budget.max_active_seqs >= num_seqs) from bytes one bound covers: no store a sequence needs
    (attention KV, recurrent state, draft KV) lies outside the bound, the ledger's categories under the
    bound sum to at most memory.bound_bytes, and the seats times a sequence's bytes fit in them. One
    allocation (vLLM) and several pools carved from one bound (SGLang) pass alike; a pool beside the
    bound fails. `memory.pool.unified` is reported, not judged."""
    check = "memory.unified_pool_seats"
    me = obs["engine"]["name"]
    if vllm["status"] != "ok" or (vllm["memory"]["max_concurrency"] or 0) < num_seqs:
        return _v(check, obs, FAIL, f"the case is meant to give vLLM room for {num_seqs} full-length sequences; "
                  f"vLLM: {vllm['status']} {(vllm.get('memory') or {}).get('max_concurrency')} [{source}]")
    if obs["status"] != "ok":
        return _v(check, obs, FAIL, f"{me} {obs['status']} where vLLM seats {vllm['memory']['max_concurrency']:.2f} "
                  f"sequences from one bound: {obs.get('message')} [{source}]")
    mem, budget = obs["memory"], obs.get("budget") or {}
    ledger, bound = mem.get("ledger_bytes") or {}, mem.get("bound_bytes")
    problems = _unplaced_draft_kv(obs, case_spec)
    outside = [c for c in (mem.get("outside_bound") or ()) if c in POOL_CATEGORIES]
    if outside:
        problems.append(f"memory.outside_bound lists {', '.join(f'{c} ({human_bytes(ledger.get(c))})' for c in outside)}:"
                        f" a pool beside the bound (vLLM: every KV cache group in one bounded allocation; SGLang: its "
                        f"pools carved from one bound)")
    held, cats = bounded_bytes({"ledger_bytes": {c: v for c, v in ledger.items()
                                                 if c not in (mem.get("outside_bound") or ())}}, case_spec)
    if bound is None:
        problems.append("memory.bound_bytes is null: the engine did not say which bound its pools share")
    elif held > bound:
        problems.append(f"memory.ledger_bytes ({', '.join(cats)}) sum to {held} B ({human_bytes(held)}), over "
                        f"memory.bound_bytes {bound} B by {held - bound} B: the pools are not carved from one bound")
    if (budget.get("max_active_seqs") or 0) < num_seqs:
        problems.append(f"budget.max_active_seqs {budget.get('max_active_seqs')} < {num_seqs} (vLLM "
                        f"{vllm['budget']['max_active_seqs']})")
    seats = mem.get("max_concurrency") or 0
    if seats < num_seqs:
        problems.append(f"memory.max_concurrency {mem.get('max_concurrency')} < {num_seqs} "
                        f"(vLLM {vllm['memory']['max_concurrency']:.3f})")
    per = mem.get("per_sequence") or {}
    per_seq = sum(per.get(f"{c}_bytes") or 0 for c in POOL_CATEGORIES)
    seated = min(num_seqs, math.floor(seats))
    if seated * per_seq > held:
        problems.append(f"the seats do not come from the bounded bytes: {seated} seats x {per_seq} B per sequence "
                        f"(memory.per_sequence) = {seated * per_seq} B > the {held} B the ledger holds under the bound")
    elif per_seq == 0:
        problems.append("memory.per_sequence reports no bytes: nothing shows the seats come from the pool's bytes")
    if problems:
        return _v(check, obs, FAIL, f"does not seat {num_seqs} from one bound where vLLM does: {problems[0]} "
                  f"[{source}]", tuple(problems))
    return _v(check, obs, PASS, f"seats {mem['max_concurrency']} >= {num_seqs} from {human_bytes(held)} under the "
              f"bound of {human_bytes(bound)} ({seated} x {per_seq} B per sequence fit) [{source}]")


def explains_short_seats(obs: dict[str, Any]) -> Verdict:
    """At a bound too small for max_num_seqs full-length sequences, the engine still plans and says
    how many it seats and why: its message states `seats N` with N < max_num_seqs and N within the
    pool's max_concurrency."""
    check = "memory.explains_short_seats"
    if obs["status"] != "ok":
        return _v(check, obs, SKIP, f"{obs['status']}: {obs.get('message')}")
    seats, asked = obs["memory"].get("max_concurrency"), (obs.get("budget") or {}).get("max_num_seqs")
    unreported = null_fields("memory", obs["memory"], ("max_concurrency",)) + null_fields("budget", obs.get("budget"),
                                                                                          ("max_num_seqs",))
    if unreported:
        return _v(check, obs, FAIL, f"{_not_reported(unreported)} (memory.max_concurrency {seats}, budget.max_num_seqs "
                  f"{asked}: whether the pool seats max_num_seqs)", unreported)
    if seats >= asked:
        return _v(check, obs, SKIP, f"the pool holds max_num_seqs {asked} full-length sequences ({seats})")
    m = re.search(r"seats (\d{1,18}) full-length", obs.get("message") or "")   # more digits: no seat count
    if not m:
        return _v(check, obs, FAIL, f"memory.max_concurrency {seats:.2f} < budget.max_num_seqs {asked}, but the "
                  f"observation's message does not say how many it seats ('seats N full-length ...'): "
                  f"{obs.get('message')!r}")
    n = int(m.group(1))
    if not (n < asked and n <= seats):
        return _v(check, obs, FAIL, f"says it seats {n}, inconsistent with memory.max_concurrency {seats} / "
                  f"budget.max_num_seqs {asked}")
    return _v(check, obs, PASS, obs["message"])


def draft_kv_scaling(small: dict[str, Any], large: dict[str, Any], case_spec: dict[str, Any]) -> Verdict:
    """Bug 1: in both observations draft KV is inside the bound (and said to be: a DFlash plan that
    does not say where its draft KV lives fails), a full-length sequence's draft KV is the same, and
    `max_num_seqs` full-length sequences -- their draft KV included, which grows with max_num_seqs --
    fit inside the bound. `case_spec` is the small case's (the pair differ in max_num_seqs only)."""
    check = "memory.draft_kv_scaling"
    for o in (small, large):
        if o["status"] != "ok":
            return _v(check, small, SKIP, f"{o['case_id']}: {o['status']}: {o.get('message')}")
    unplaced = {o["case_id"]: _unplaced_draft_kv(o, case_spec) for o in (small, large)}
    problems = [f"{o['case_id']}: {line}" for o in (small, large) for line in unplaced[o["case_id"]]]
    problems += [f"{o['case_id']}: memory.outside_bound lists draft_kv "
                f"({human_bytes((o['memory'].get('ledger_bytes') or {}).get('draft_kv'))}): allocated beside the pool"
                for o in (small, large) if "draft_kv" in (o["memory"].get("outside_bound") or ())]
    unreported = [f"{o['case_id']}: {p}" for o in (small, large)
                  for p in null_fields("memory.per_sequence", o["memory"].get("per_sequence"),
                                       ("attention_kv_bytes", "recurrent_state_bytes", "draft_kv_bytes"))]
    if unreported and not any(_draft_kv_says_first(o, unplaced[o["case_id"]]) for o in (small, large)):
        return _v(check, small, FAIL, f"{_not_reported(unreported)} (all per-sequence state against the bound)",
                  tuple(unreported) + tuple(problems))
    if unreported:
        return _v(check, small, FAIL, f"draft KV does not scale inside the bound: {problems[0]}",
                  tuple(problems + unreported))
    per_s, per_l = ((o["memory"].get("per_sequence") or {}).get("draft_kv_bytes") for o in (small, large))
    seqs_s, seqs_l = ((o.get("budget") or {}).get("max_num_seqs") for o in (small, large))
    if not per_s or per_s != per_l:
        problems.append(f"memory.per_sequence.draft_kv_bytes of a full-length sequence differs: {per_s} vs {per_l}")
    if not (seqs_s and seqs_l and seqs_l > seqs_s):
        problems.append(f"budget.max_num_seqs does not grow: {seqs_s} -> {seqs_l}")
    figures = []
    for o in (small, large):
        per = o["memory"].get("per_sequence") or {}
        seqs = (o.get("budget") or {}).get("max_num_seqs") or 0
        need = seqs * sum(per.get(k) or 0 for k in ("attention_kv_bytes", "recurrent_state_bytes", "draft_kv_bytes"))
        bound = o["memory"].get("bound_bytes")
        figures.append(f"{seqs} seqs: draft KV {seqs * (per.get('draft_kv_bytes') or 0)} B "
                       f"({human_bytes(seqs * (per.get('draft_kv_bytes') or 0))}), all per-sequence state {need} B "
                       f"of the bound {bound} B")
        if bound is None or need > bound:
            problems.append(f"{o['case_id']}: {seqs} full-length sequences need {need} B, over memory.bound_bytes "
                            f"{bound} B" + (f" by {need - bound} B ({human_bytes(need - bound)})" if bound else ""))
        held, cats = bounded_bytes(o["memory"], case_spec)
        if bound is not None and "draft_kv" in cats and held > bound:
            problems.append(f"{o['case_id']}: the ledger with its draft KV ({', '.join(cats)}) sums to {held} B, over "
                            f"memory.bound_bytes {bound} B by {held - bound} B ({human_bytes(held - bound)}): the draft "
                            f"KV is not inside the bound")
    if problems:
        return _v(check, small, FAIL, f"draft KV does not scale inside the bound: {problems[0]}",
                  tuple(problems + figures))
    return _v(check, small, PASS, "; ".join(figures), tuple(figures))


# --- trace suite --------------------------------------------------------------------------------

def steps_within_budget(obs: dict[str, Any], vllm: dict[str, Any] | None, source: str) -> Verdict:
    """No step schedules more than the budget: each step's `total_num_scheduled_tokens` plus the
    drafting slots reserved for its `num_scheduled_requests` stays within max_num_scheduled_tokens,
    and its requests within max_active_seqs -- by the engine's own budget, and by vLLM's (its
    budget and its drafting slots per request) when vLLM plans the case."""
    check = "trace.steps_within_budget"
    if obs["status"] != "ok" or not obs.get("trace"):
        return _v(check, obs, SKIP, f"{obs['status']}: no trace ({obs.get('message')})")
    steps = obs["trace"]["steps"]
    if not steps:
        return _v(check, obs, FAIL, "trace.steps is empty: an ok trace has at least one step")
    unreported = null_fields("budget", obs.get("budget"), ("max_num_scheduled_tokens", "drafting_slots_per_request",
                                                           "max_active_seqs"))
    if unreported:
        return _v(check, obs, FAIL, f"{_not_reported(unreported)} (each of the {len(steps)} steps is charged against "
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
        return _v(check, obs, FAIL, f"{len(problems)} step(s) over the step budget: {problems[0]}", problems)
    return _v(check, obs, PASS, f"{len(steps)} steps within {' and '.join(label for label, _ in budgets)}")


TRACE_DIFFERENCES = ("equal_until_first_preemption",)


def trace_equals_vllm(obs: dict[str, Any], vllm: dict[str, Any], case_spec: dict[str, Any], source: str) -> Verdict:
    """Step for step equal to vLLM on the four counted fields. A case may document a trace
    difference for this engine (`intended_differences` field `trace`, `engines` naming it or `*`)
    with `expected` one of TRACE_DIFFERENCES:
    `equal_until_first_preemption` checks equality through vLLM's first preempting step, and that
    the traces do differ after it (a stale entry fails). On a gpu_memory_utilization case whose
    pools differ in bytes (each engine's own reserves) the check is skipped, naming both pools."""
    check = "trace.equals_vllm"
    me = obs["engine"]["name"]
    if vllm["status"] != "ok" or documents_status_difference(case_spec, "vllm", me):
        return _v(check, obs, SKIP, f"vLLM {vllm['status']}: {vllm.get('message')} (status compared by "
                  f"budget.parity_with_vllm) [{source}]")
    if obs["status"] != "ok" or not obs.get("trace"):
        return _v(check, obs, FAIL, f"{me} has no trace where vLLM schedules {len((vllm.get('trace') or {}).get('steps', []))}"
                  f" steps: {obs['status']} {obs.get('message') or '(trace is null)'} [{source}]")
    pools = _own_pools(obs, vllm, case_spec)
    if pools is not None and pools[0] != pools[1]:
        return _v(check, obs, SKIP, f"pools differ on a gpu_memory_utilization case: {me} {human_bytes(pools[0])}, vLLM "
                  f"{human_bytes(pools[1])} (each engine's reserves beside the pool are its own), so their schedules "
                  f"need not agree; traces are compared on the same bytes (kv_cache_bytes cases) [{source}]")
    mine = [{f: s[f] for f in STEP_FIELDS} for s in obs["trace"]["steps"]]
    theirs = [{f: s[f] for f in STEP_FIELDS} for s in (vllm.get("trace") or {}).get("steps", [])]
    first = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), None)
    if first is None and len(mine) != len(theirs):
        first = min(len(mine), len(theirs))
    documented = _intended(case_spec, "vllm", "trace", me)

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
            return _v(check, obs, FAIL, f"unknown documented trace difference {documented['expected']!r} "
                      f"(known: {', '.join(TRACE_DIFFERENCES)})")
        preempt = next((i for i, s in enumerate(theirs) if s["num_preempted"] > 0), None)
        if preempt is None:
            return _v(check, obs, FAIL, f"documented difference {documented['expected']} but vLLM never preempts "
                      f"[{source}]")
        if first is not None and first <= preempt:
            return _v(check, obs, FAIL, f"traces differ at step {first}, before vLLM's first preemption at step "
                      f"{preempt} [{source}]", at(first))
        if first is None:
            return _v(check, obs, FAIL, f"the case documents a trace difference after vLLM's preemption that no "
                      f"longer exists: the traces are equal [{source}]")
        return _v(check, obs, PASS, f"equal through vLLM's first preemption (step {preempt}), then differ from step "
                  f"{first} as documented: {documented['reason']} [{source}]")
    if first is not None:
        return _v(check, obs, FAIL, f"trace differs from {_name(vllm)} first at step {first} of {len(theirs)} "
                  f"({len(mine)} steps in {me}'s) [{source}]", at(first))
    return _v(check, obs, PASS, f"{len(mine)} steps equal vLLM's [{source}]")


# --- live (run mode): what the engine really did, measured from outside ------------------------------

def _live(obs: dict[str, Any]) -> dict[str, Any]:
    return (obs.get("throughput") or {}).get("live") or {}


def live_concurrency_served(obs: dict[str, Any], case_spec: dict[str, Any]) -> Verdict:
    """Bug 2 as an operator meets it: at the top rung the engine runs min(max_num_seqs, concurrency)
    requests at once (its running-requests gauge, sampled through the rung), never more than
    max_num_seqs. Reads `throughput.live.by_phase[top_rung].max_running_requests`. An open-loop ladder
    holds no fixed number of requests in flight, so it is skipped."""
    check = "live.concurrency_served"
    live = _live(obs)
    top = live.get("top_rung")
    if live.get("mode") == "open":
        return _v(check, obs, SKIP, "open-loop ladder: no rung holds a fixed concurrency to compare with max_num_seqs")
    phase = ((live.get("by_phase") or {}).get(top) or {}) if top else {}
    got = phase.get("max_running_requests")
    if top is None or got is None:
        return _v(check, obs, SKIP, "running requests not measured: " + "; ".join(live.get("notes") or ["no live figures"]))
    if (phase.get("num_samples") or 0) < MIN_CONCURRENCY_SAMPLES:
        return _v(check, obs, SKIP, f"{phase.get('num_samples')} sample(s) of the running-requests gauge at {top}: a rung "
                  f"this short cannot show the concurrency (at least {MIN_CONCURRENCY_SAMPLES} needed; serve longer outputs)")
    seqs = case_spec["scheduler"]["max_num_seqs"]
    want = min(seqs, int(top.split("=", 1)[1]))
    if got > seqs:
        return _v(check, obs, FAIL, f"{got} requests ran at once at {top}, more than max_num_seqs {seqs}")
    if got < want:
        return _v(check, obs, FAIL, f"at most {got} requests ran at once at {top} where max_num_seqs {seqs} and the "
                  f"load ask for {want}{_by(got, want, 'seqs')}: the engine seats fewer than vLLM would run")
    return _v(check, obs, PASS, f"{got} requests ran at once at {top} (max_num_seqs {seqs})")
