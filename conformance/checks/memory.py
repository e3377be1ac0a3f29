"""The memory suite's checks (suites/memory/README.md): the pool plan and the memory ledger, against
the operator's bound, the engine's own figures and vLLM's.

Contract: each check is `run(CheckInput) -> Verdict` (`checks.row`); `ROWS` are the suite's rows of
the check table, its golden first. A DFlash plan that does not say where its draft KV lives passes no
bound check (`memory_facts.draft_kv_location`); a figure a check needs that the engine left null
fails it, naming the field.
"""

from __future__ import annotations

import math
import re
from typing import Any

from conformance.checks.common import (by, documents_status_difference, engine_label, human_bytes, intended,
                                       not_reported, null_fields, verdict, whom)
from conformance.checks.golden import golden_row
from conformance.checks.memory_facts import (NOT_UNDER_KV_BOUND, STORES, UNKNOWN, draft_kv_location, pool_differences)
from conformance.checks.row import BOTH, UNDER_TEST, CheckInput, CheckSpec
from conformance.checks.verdicts import FAIL, PASS, SKIP, Verdict

PER_SEQUENCE_FIELDS = ("attention_kv_bytes", "recurrent_state_bytes", "draft_kv_bytes", "state_slots")
SEATS_REL_TOLERANCE = 0.005   # max_concurrency may differ from vLLM's by 0.5% (float rounding of pages)


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


def inside_the_bound(given: CheckInput) -> Verdict:
    """Nothing outside the operator's bound: `memory.outside_bound` is empty, the ledger's
    categories under the bound sum to at most `memory.bound_bytes`, and a DFlash plan says where its
    draft KV lives (`memory_facts.draft_kv_location`: a plan that does not cannot pass a bound check)."""
    obs, case_spec = given.obs, given.case_spec
    check = "memory.inside_bound"
    if obs["status"] != "ok":
        return verdict(check, obs, SKIP, f"{obs['status']}: {obs.get('message')}")
    mem = obs["memory"]
    ledger = mem.get("ledger_bytes") or {}
    bound = mem.get("bound_bytes")
    total, cats = bounded_bytes(mem, case_spec)
    unreported = null_fields("memory.ledger_bytes", ledger, list(cats) + [c for c in mem.get("outside_bound") or ()
                                                                         if c not in cats])
    unplaced = _unplaced_draft_kv(obs, case_spec)
    null_line = (f"{not_reported(unreported)} (a category the bound must cover, summed against memory.bound_bytes "
                 f"{bound})") if unreported else ""
    if unreported and not _draft_kv_says_first(obs, unplaced):
        return verdict(check, obs, FAIL, null_line, tuple(unreported) + tuple(unplaced))
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
        return verdict(check, obs, FAIL, problems[0], problems)
    return verdict(check, obs, PASS, f"ledger {total} B within the bound {bound} B")


def ledger_holds_seats(given: CheckInput) -> Verdict:
    """What the engine says a sequence costs, times the sequences it seats, fits in what its
    ledger puts under the bound: `min(budget.max_num_seqs, floor(memory.max_concurrency))` x the
    sum of `memory.per_sequence` bytes <= the ledger's categories under the bound. An engine that
    keeps a per-request store (draft KV, say) out of its ledger fails here, from its own figures; so
    does a DFlash plan that does not say where its draft KV lives."""
    obs, case_spec = given.obs, given.case_spec
    check = "memory.ledger_holds_seats"
    if obs["status"] != "ok":
        return verdict(check, obs, SKIP, f"{obs['status']}: {obs.get('message')}")
    unplaced = _unplaced_draft_kv(obs, case_spec)
    if _draft_kv_says_first(obs, unplaced):
        return verdict(check, obs, FAIL, f"cannot tell whether the ledger holds the seats: {unplaced[0]}", unplaced)
    mem = obs["memory"]
    per = mem.get("per_sequence") or {}
    seats_f, asked = mem.get("max_concurrency"), (obs.get("budget") or {}).get("max_num_seqs")
    if seats_f is None or asked is None:
        return verdict(check, obs, FAIL, f"memory.max_concurrency {seats_f!r} / budget.max_num_seqs {asked!r}: the engine "
                       f"does not say how many sequences its pool seats")
    seats = min(int(asked), math.floor(seats_f))
    ledger = mem.get("ledger_bytes") or {}
    outside = set(mem.get("outside_bound") or ())
    _, held_cats = bounded_bytes({"ledger_bytes": {c: v for c, v in ledger.items() if c not in outside}}, case_spec)
    unreported = (null_fields("memory.per_sequence", per, ("attention_kv_bytes", "recurrent_state_bytes", "draft_kv_bytes"))
                  + null_fields("memory.ledger_bytes", ledger, held_cats))
    if unreported:
        return verdict(check, obs, FAIL, f"{not_reported(unreported)} (what a sequence costs and what the ledger holds "
                       f"under the bound, for {seats} seats)", tuple(unreported) + tuple(unplaced))
    if unplaced:
        return verdict(check, obs, FAIL, f"cannot tell whether the ledger holds the seats: {unplaced[0]}", unplaced)
    per_seq = sum(per[k] for k in ("attention_kv_bytes", "recurrent_state_bytes", "draft_kv_bytes"))
    need = seats * per_seq
    held, _ = bounded_bytes({"ledger_bytes": {c: v for c, v in ledger.items() if c not in outside}}, case_spec)
    if need > held:
        lines = [f"{seats} seats x {per_seq} B per sequence (memory.per_sequence: attention {per.get('attention_kv_bytes')}"
                 f", state {per.get('recurrent_state_bytes')}, draft {per.get('draft_kv_bytes')}) = {need} B "
                 f"({human_bytes(need)})",
                 f"the ledger holds {held} B ({human_bytes(held)}) under the bound: {need - held} B "
                 f"({human_bytes(need - held)}) of what the seats need is not in the pool"]
        return verdict(check, obs, FAIL, f"memory.ledger_bytes cannot hold the {seats} sequences memory.max_concurrency "
                       f"seats: short by {need - held} B ({human_bytes(need - held)}); a per-request store kept beside the "
                       f"pool would look like this (only a live check measures what is really allocated)", lines)
    return verdict(check, obs, PASS, f"{seats} seats x {per_seq} B = {need} B within the {held} B the ledger holds")


def _not_comparable(check: str, given: CheckInput, vllm_does: str) -> Verdict | None:
    """The verdict of a comparison with vLLM's memory plan that cannot compare: skipped where vLLM does
    not plan the case or the case documents a status difference from it (the status is judged by
    budget.parity_with_vllm), failed where vLLM plans (`vllm_does`: `plans`, `seats 36.0`) and the engine
    does not. None where both plan."""
    obs, vllm, source = given.obs, given.other, given.source
    me = obs["engine"]["name"]
    if vllm["status"] != "ok" or documents_status_difference(given.case_spec, "vllm", me):
        return verdict(check, obs, SKIP, f"vLLM {vllm['status']}: {vllm.get('message')} [{source}]")
    if obs["status"] != "ok":
        return verdict(check, obs, FAIL, f"{me} {obs['status']} where vLLM {vllm_does}: {obs.get('message')} [{source}]")
    return None


def per_sequence_equals_vllm(given: CheckInput) -> Verdict:
    """A full-length sequence costs what it costs in vLLM: `memory.per_sequence` attention KV,
    recurrent state and draft KV bytes and state slots equal vLLM's, exactly. A failure says whether
    the difference is one of accounting (a store vLLM counts that the engine leaves out of its ledger
    or keeps outside the bound) or of layout (block size, Mamba page padding, KV-cache group padding,
    each with vLLM's figure and deciding function from vLLM's document): `memory_facts.pool_differences`."""
    obs, vllm, source = given.obs, given.other, given.source
    check = "memory.per_sequence_equals_vllm"
    me = obs["engine"]["name"]
    not_comparable = _not_comparable(check, given, "plans")
    if not_comparable:
        return not_comparable
    mine, theirs = obs["memory"].get("per_sequence") or {}, vllm["memory"].get("per_sequence") or {}
    problems = []
    for f in PER_SEQUENCE_FIELDS:
        if mine.get(f) != theirs.get(f):
            unit = "slots" if f == "state_slots" else "bytes"
            problems.append(f"memory.per_sequence.{f}: vLLM {theirs.get(f)!r}, {me} {mine.get(f)!r}"
                            f"{by(mine.get(f), theirs.get(f), unit)}")
    if problems:
        why = pool_differences(obs, vllm)
        return verdict(check, obs, FAIL, f"a full-length sequence costs other than in {engine_label(vllm)}: {problems[0]}"
                       f"{'; ' + why.summary() if why.kind else ''} [{source}]", problems + list(why.lines()))
    return verdict(check, obs, PASS, f"per-sequence attention, state, draft bytes and state slots equal vLLM's [{source}]")


def own_pools(obs: dict[str, Any], vllm: dict[str, Any], case_spec: dict[str, Any]) -> tuple[int, int] | None:
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


def seats_equal_vllm(given: CheckInput) -> Verdict:
    """`memory.max_concurrency` equals vLLM's for the same bytes within SEATS_REL_TOLERANCE: fewer
    seats is the two-pool bug; more seats is an accounting difference (a store not in the ledger) or a
    layout difference (vLLM's block size, page or group padding not taken), and the message says
    which (`memory_facts.pool_differences`). A case
    may document a seat difference (`intended_differences`, oracle vllm, field
    memory.max_concurrency, `engines` naming the engine or `*`): then the engine's seats must be the entry's `expected` and vLLM's must
    still differ from them (a stale entry fails), both within the same tolerance. On a
    gpu_memory_utilization case each engine sizes its own pool: the engine's seats are compared with
    vLLM's seats per pool byte times the engine's pool bytes."""
    obs, vllm, case_spec, source = given.obs, given.other, given.case_spec, given.source
    check = "memory.seats_equal_vllm"
    me = obs["engine"]["name"]
    not_comparable = _not_comparable(check, given, f"seats {(vllm.get('memory') or {}).get('max_concurrency')}")
    if not_comparable:
        return not_comparable
    mine, theirs = obs["memory"].get("max_concurrency"), vllm["memory"].get("max_concurrency")
    documented = intended(case_spec, "vllm", "memory.max_concurrency", me)
    if documented:
        if not _seats_close(mine, float(documented["expected"])):
            return verdict(check, obs, FAIL, f"the case documents {whom(documented, me)} seating {documented['expected']} "
                           f"where vLLM seats "
                           f"{theirs} ({documented['reason']}), but {me} seats {mine} [{source}]")
        if _seats_close(mine, theirs):
            return verdict(check, obs, FAIL, f"the case documents a seat difference from vLLM that no longer exists: both "
                           f"seat {mine} [{source}]")
        return verdict(check, obs, PASS, f"documented difference: {me} seats {mine}, vLLM {theirs} "
                       f"({documented['reason']}) [{source}]")
    pools = own_pools(obs, vllm, case_spec)
    if pools is not None and theirs is not None:
        scaled = theirs * pools[0] / pools[1]
        where = (f"in its own pool of {human_bytes(pools[0])} where vLLM's seats per byte give {scaled:.6g} "
                 f"(vLLM seats {theirs} in {human_bytes(pools[1])}: each engine's reserves beside the pool are its own)")
        if not _seats_close(mine, scaled):
            why, lines = _seats_why(obs, vllm, mine, scaled, "its pool seats fewer full-length sequences per byte")
            return verdict(check, obs, FAIL, f"memory.max_concurrency: {me} seats {mine} full-length sequences {where}"
                           f"{by(mine, scaled, 'seats')}; {why} [{source}]", lines)
        return verdict(check, obs, PASS, f"seats {mine} {where}, within {SEATS_REL_TOLERANCE:.1%} [{source}]")
    if not _seats_close(mine, theirs):
        why, lines = _seats_why(obs, vllm, mine, theirs, "the same bytes seat fewer full-length sequences")
        return verdict(check, obs, FAIL, f"memory.max_concurrency: {me} seats {mine} full-length sequences where vLLM seats "
                       f"{theirs} in the same bytes{by(mine, theirs, 'seats')}; {why} [{source}]", lines)
    return verdict(check, obs, PASS, f"seats {mine} = vLLM's {theirs} (within {SEATS_REL_TOLERANCE:.1%}) [{source}]")


def unified_pool_seats(given: CheckInput) -> Verdict:
    """Bug 2, judged on the outcome, not on a structure flag: where vLLM plans room for `num_seqs`
    (the case's `scheduler.max_num_seqs`)
    concurrent full-length sequences, the engine seats them (memory.max_concurrency and
    budget.max_active_seqs >= num_seqs) from bytes one bound covers: no store a sequence needs
    (attention KV, recurrent state, draft KV) lies outside the bound, the ledger's categories under the
    bound sum to at most memory.bound_bytes, and the seats times a sequence's bytes fit in them. One
    allocation (vLLM) and several pools carved from one bound (SGLang) pass alike; a pool beside the
    bound fails. `memory.pool.unified` is reported, not judged."""
    obs, vllm, case_spec, source = given.obs, given.other, given.case_spec, given.source
    num_seqs = int(case_spec["scheduler"]["max_num_seqs"])
    check = "memory.unified_pool_seats"
    me = obs["engine"]["name"]
    if vllm["status"] != "ok" or (vllm["memory"]["max_concurrency"] or 0) < num_seqs:
        return verdict(check, obs, FAIL, f"the case is meant to give vLLM room for {num_seqs} full-length sequences; "
                       f"vLLM: {vllm['status']} {(vllm.get('memory') or {}).get('max_concurrency')} [{source}]")
    if obs["status"] != "ok":
        return verdict(check, obs, FAIL, f"{me} {obs['status']} where vLLM seats {vllm['memory']['max_concurrency']:.2f} "
                       f"sequences from one bound: {obs.get('message')} [{source}]")
    mem, budget = obs["memory"], obs.get("budget") or {}
    ledger, bound = mem.get("ledger_bytes") or {}, mem.get("bound_bytes")
    problems = _unplaced_draft_kv(obs, case_spec)
    outside = [c for c in (mem.get("outside_bound") or ()) if c in STORES]
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
    per_seq = sum(per.get(f"{c}_bytes") or 0 for c in STORES)
    seated = min(num_seqs, math.floor(seats))
    if seated * per_seq > held:
        problems.append(f"the seats do not come from the bounded bytes: {seated} seats x {per_seq} B per sequence "
                        f"(memory.per_sequence) = {seated * per_seq} B > the {held} B the ledger holds under the bound")
    elif per_seq == 0:
        problems.append("memory.per_sequence reports no bytes: nothing shows the seats come from the pool's bytes")
    if problems:
        return verdict(check, obs, FAIL, f"does not seat {num_seqs} from one bound where vLLM does: {problems[0]} "
                       f"[{source}]", tuple(problems))
    return verdict(check, obs, PASS, f"seats {mem['max_concurrency']} >= {num_seqs} from {human_bytes(held)} under the "
                   f"bound of {human_bytes(bound)} ({seated} x {per_seq} B per sequence fit) [{source}]")


def explains_short_seats(given: CheckInput) -> Verdict:
    """At a bound too small for max_num_seqs full-length sequences, the engine still plans and says
    how many it seats and why: its message states `seats N` with N < max_num_seqs and N within the
    pool's max_concurrency."""
    obs = given.obs
    check = "memory.explains_short_seats"
    if obs["status"] != "ok":
        return verdict(check, obs, SKIP, f"{obs['status']}: {obs.get('message')}")
    seats, asked = obs["memory"].get("max_concurrency"), (obs.get("budget") or {}).get("max_num_seqs")
    unreported = null_fields("memory", obs["memory"], ("max_concurrency",)) + null_fields("budget", obs.get("budget"),
                                                                                          ("max_num_seqs",))
    if unreported:
        return verdict(check, obs, FAIL, f"{not_reported(unreported)} (memory.max_concurrency {seats}, budget.max_num_seqs "
                       f"{asked}: whether the pool seats max_num_seqs)", unreported)
    if seats >= asked:
        return verdict(check, obs, SKIP, f"the pool holds max_num_seqs {asked} full-length sequences ({seats})")
    m = re.search(r"seats (\d{1,18}) full-length", obs.get("message") or "")   # more digits: no seat count
    if not m:
        return verdict(check, obs, FAIL, f"memory.max_concurrency {seats:.2f} < budget.max_num_seqs {asked}, but the "
                       f"observation's message does not say how many it seats ('seats N full-length ...'): "
                       f"{obs.get('message')!r}")
    n = int(m.group(1))
    if not (n < asked and n <= seats):
        return verdict(check, obs, FAIL, f"says it seats {n}, inconsistent with memory.max_concurrency {seats} / "
                       f"budget.max_num_seqs {asked}")
    return verdict(check, obs, PASS, obs["message"])


def draft_kv_scaling(given: CheckInput) -> Verdict:
    """Bug 1: in both observations draft KV is inside the bound (and said to be: a DFlash plan that
    does not say where its draft KV lives fails), a full-length sequence's draft KV is the same, and
    `max_num_seqs` full-length sequences -- their draft KV included, which grows with max_num_seqs --
    fit inside the bound. `given.obs` is the small case's observation (its `case_spec` too: the pair
    differ in max_num_seqs only), `given.partner` the large case's."""
    small, large, case_spec = given.obs, given.partner, given.case_spec
    check = "memory.draft_kv_scaling"
    for o in (small, large):
        if o["status"] != "ok":
            return verdict(check, small, SKIP, f"{o['case_id']}: {o['status']}: {o.get('message')}")
    unplaced = {o["case_id"]: _unplaced_draft_kv(o, case_spec) for o in (small, large)}
    problems = [f"{o['case_id']}: {line}" for o in (small, large) for line in unplaced[o["case_id"]]]
    problems += [f"{o['case_id']}: memory.outside_bound lists draft_kv "
                f"({human_bytes((o['memory'].get('ledger_bytes') or {}).get('draft_kv'))}): allocated beside the pool"
                for o in (small, large) if "draft_kv" in (o["memory"].get("outside_bound") or ())]
    unreported = [f"{o['case_id']}: {p}" for o in (small, large)
                  for p in null_fields("memory.per_sequence", o["memory"].get("per_sequence"),
                                       ("attention_kv_bytes", "recurrent_state_bytes", "draft_kv_bytes"))]
    if unreported and not any(_draft_kv_says_first(o, unplaced[o["case_id"]]) for o in (small, large)):
        return verdict(check, small, FAIL, f"{not_reported(unreported)} (all per-sequence state against the bound)",
                       tuple(unreported) + tuple(problems))
    if unreported:
        return verdict(check, small, FAIL, f"draft KV does not scale inside the bound: {problems[0]}",
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
        return verdict(check, small, FAIL, f"draft KV does not scale inside the bound: {problems[0]}",
                       tuple(problems + figures))
    return verdict(check, small, PASS, "; ".join(figures), tuple(figures))



_PER_SEQUENCE_BYTES = ("memory.per_sequence.attention_kv_bytes", "memory.per_sequence.recurrent_state_bytes",
                       "memory.per_sequence.draft_kv_bytes")

ROWS: tuple[CheckSpec, ...] = (
    golden_row("memory"),
    CheckSpec("memory.inside_bound", "memory", (UNDER_TEST,), inside_the_bound,
              "anything lies outside the bound, or the ledger sums past it (bytes named), or a DFlash plan does not "
              "say where its draft KV lives",
              reads=("memory.outside_bound", "memory.ledger_bytes", "memory.bound_bytes",
                     "memory.per_sequence.draft_kv_bytes")),
    CheckSpec("memory.ledger_holds_seats", "memory", (UNDER_TEST,), ledger_holds_seats,
              "the seats times a sequence's bytes do not fit in what the ledger holds (a store kept beside the "
              "pool), or a DFlash plan does not say where its draft KV lives",
              reads=_PER_SEQUENCE_BYTES + ("memory.max_concurrency", "budget.max_num_seqs", "memory.ledger_bytes",
                                           "memory.outside_bound")),
    CheckSpec("memory.per_sequence_equals_vllm", "memory", (UNDER_TEST,), per_sequence_equals_vllm,
              "a full-length sequence's attention, state or draft bytes or state slots differ from vLLM's; the "
              "message says whether it is a layout difference (block size, Mamba page or group padding, with "
              "vLLM's figure and function) or an accounting one (a store not in the ledger)", against="vllm",
              reads=_PER_SEQUENCE_BYTES + ("memory.per_sequence.state_slots", "memory.pool.block_size_tokens",
                                           "memory.pool.page_size_bytes", "memory.ledger_bytes",
                                           "memory.outside_bound")),
    CheckSpec("memory.seats_equal_vllm", "memory", (UNDER_TEST,), seats_equal_vllm,
              "seats differ from vLLM's by more than 0.5% (fewer: two pools; more: a layout or an accounting "
              "difference, named)", against="vllm",
              reads=("memory.max_concurrency", "memory.pool.size_bytes", "memory.pool.block_size_tokens",
                     "memory.pool.page_size_bytes", "memory.ledger_bytes") + _PER_SEQUENCE_BYTES),
    CheckSpec("memory.unified_pool_seats", "memory", (UNDER_TEST,), unified_pool_seats,
              "the case's max_num_seqs (32) are not seated from bytes one bound covers (one allocation, or pools "
              "carved from one bound as SGLang's; `pool.unified` is not judged)", against="vllm",
              case_globs=("seed-unified-pool-c32-k8",),
              reads=("memory.outside_bound", "memory.ledger_bytes", "memory.bound_bytes") + _PER_SEQUENCE_BYTES
              + ("memory.max_concurrency", "budget.max_active_seqs")),
    CheckSpec("memory.explains_short_seats", "memory", (UNDER_TEST,), explains_short_seats,
              "a pool short of max_num_seqs does not say how many it seats",
              reads=("message", "memory.max_concurrency", "budget.max_num_seqs")),
    CheckSpec("memory.draft_kv_scaling", "memory", BOTH, draft_kv_scaling,
              "draft KV lies outside the bound, is not said to be anywhere, or does not fit at 8 and 32 sequences",
              case_globs=("seed-draft-kv-c8",), partner="seed-draft-kv-c32",
              reads=_PER_SEQUENCE_BYTES + ("memory.outside_bound", "memory.ledger_bytes", "memory.bound_bytes",
                                           "budget.max_num_seqs")),
)
