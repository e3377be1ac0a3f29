"""The live checks: an engine served on a device, judged against the oracle's live figures.

Contract: each check is a pure function of documents (a run observation, the oracle's document, the
case spec) returning one `Verdict`; nothing here reads a file or knows an engine by name. The oracle's
document (`other`) is its run observation of this run on this card when there is one, else its live
golden (`source` says which); both go through `view.live_view`. Outcomes:

    pass / fail            as everywhere
    inconclusive           a timing interval straddles its band's limit: noise alone never fails
    finding                an oracle breaks its own definition (vLLM over its own bound), or the two
                           oracles disagree live by more than the noise: a fact about the oracles,
                           shown, not a failure
    skip                   nothing to judge (the case bounds KV bytes, not the process; no device)

Order: acceptance is judged before throughput. Two engines at different acceptance say nothing about
speed, so `throughput_parity` is inconclusive, saying why, whenever `acceptance_equals_oracle` fails.
"""

from __future__ import annotations

from typing import Any

from conformance.checks.intervals import (FAIL as I_FAIL, INCONCLUSIVE as I_INCONCLUSIVE, fold, judge_ratio, ratio_interval)
from conformance.checks.live_view import live_view, rungs_by_concurrency
from conformance.checks.verdicts import FAIL, FINDING, INCONCLUSIVE, PASS, SKIP, Verdict
from conformance.documents import units
from conformance.documents.live_spec import Band, LiveSpec, live_spec

GOLDEN = "live.golden"
ACCEPTANCE = "live.acceptance_equals_vllm"
THROUGHPUT = "live.throughput_parity_vllm"
PLAN = "live.plan_matches_run"
MEMORY = "live.device_memory_within_bound"
RUNNING_SGLANG = "live.running_not_below_sglang"
MEMORY_SGLANG = "live.device_memory_within_sglang_bound"
ORACLES_AGREE = "live.oracles_agree"
# Startup figures that depend on how much device memory the engine measured when it started: under a
# gpu_memory_utilization bound a CPU plan cannot know them, so they are compared only under a KV-bytes bound.
MEMORY_DEPENDENT_FIGURES = ("kv_cache_tokens", "max_concurrency", "num_blocks")
MAX_CONCURRENCY_ABS_TOLERANCE = 0.01   # printed with two decimals


def _verdict(check: str, obs: dict[str, Any], outcome: str, message: str, details: list[str] | tuple = ()) -> Verdict:
    return Verdict(check, obs["engine"]["name"], obs["case_id"], outcome, message, tuple(details))


def _spec(case_spec: dict[str, Any]) -> LiveSpec:
    spec = live_spec(case_spec)
    if spec is None:   # judged from a ladder on a case with no live section: the defaults, one rung each
        spec = LiveSpec(concurrencies=(1,))
    return spec


def _name(doc: dict[str, Any] | None) -> str:
    e = (doc or {}).get("engine") or {}
    return f"{e.get('name', '?')} {e.get('version', '?')}"


def _ok_rungs(view: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {c: r for c, r in rungs_by_concurrency(view).items() if r.get("status") == "ok"}


# --- acceptance ------------------------------------------------------------------------------------

def acceptance_differences(mine: dict[str, Any], theirs: dict[str, Any], spec: LiveSpec) -> tuple[list[str], list[str]]:
    """(differences, notes) of the acceptance of two views, rung by rung where both ran."""
    a, b = _ok_rungs(mine), _ok_rungs(theirs)
    diffs, notes = [], []
    for c in sorted(set(a) & set(b)):
        ra, rb = a[c], b[c]
        la, lb = ra.get("mean_acceptance_length"), rb.get("mean_acceptance_length")
        if la is None or lb is None:
            diffs.append(f"c={c}: mean acceptance length {la} vs {lb}: "
                         f"{'this engine' if la is None else 'the oracle'} exported no acceptance counters")
        elif abs(la - lb) > spec.acceptance_mean_tolerance:
            diffs.append(f"c={c}: mean acceptance length {la:.3f} vs {lb:.3f} (+- {spec.acceptance_mean_tolerance:g})")
        pa, pb = ra.get("accepted_per_pos"), rb.get("accepted_per_pos")
        if pb is None:
            notes.append(f"c={c}: the oracle exported no per-position acceptance: only the mean compared")
        elif pa is None:
            diffs.append(f"c={c}: no per-position acceptance (vLLM's vllm:spec_decode_num_accepted_tokens_per_pos)"
                         f" where the oracle's is {_rates(pb)}")
        else:
            bad = [(i, x, y) for i, (x, y) in enumerate(zip(pa, pb)) if abs(x - y) > spec.acceptance_per_position_tolerance]
            if len(pa) != len(pb):
                diffs.append(f"c={c}: {len(pa)} draft positions vs the oracle's {len(pb)}")
            for i, x, y in bad:
                diffs.append(f"c={c}: position {i}: acceptance rate {x:.3f} vs {y:.3f} "
                             f"(+- {spec.acceptance_per_position_tolerance:g})")
    return diffs, notes


def _rates(xs: list[float]) -> str:
    return "[" + ", ".join(f"{x:.2f}" for x in xs) + "]"


def acceptance_equals_oracle(obs: dict[str, Any], other: dict[str, Any] | None, case_spec: dict[str, Any],
                             source: str) -> Verdict:
    """The same synthetic acceptance on both engines: mean acceptance length and the acceptance rate at
    each draft position equal the oracle's, rung by rung, within the case's tolerance. Reads
    `throughput.rungs[*].mean_acceptance_length` and `.accepted_per_pos`."""
    spec = _spec(case_spec)
    mine, theirs = live_view(obs), live_view(other or {})
    common = sorted(set(_ok_rungs(mine)) & set(_ok_rungs(theirs)))
    if not common:
        return _verdict(ACCEPTANCE, obs, FAIL, f"no rung measured by both this engine and {_name(other)} ({source})")
    diffs, notes = acceptance_differences(mine, theirs, spec)
    if diffs:
        return _verdict(ACCEPTANCE, obs, FAIL, f"acceptance differs from {_name(other)} ({source}) on "
                        f"{len(diffs)} figure(s): {diffs[0]}; a throughput comparison at unequal acceptance "
                        "means nothing", diffs + notes)
    r = _ok_rungs(mine)[common[0]]
    return _verdict(ACCEPTANCE, obs, PASS, f"acceptance equals {_name(other)}'s ({source}) at c="
                    f"{', '.join(map(str, common))}: mean length {r.get('mean_acceptance_length')}, per position "
                    f"{_rates(r['accepted_per_pos']) if r.get('accepted_per_pos') else '-'}", notes)


# --- throughput ------------------------------------------------------------------------------------

def _compare_rungs(mine: dict[str, Any], theirs: dict[str, Any], band: Band) -> tuple[list[str], list[str], list[int]]:
    """Per rung both measured and per figure of `band`: (outcomes, lines, common rungs)."""
    a, b = _ok_rungs(mine), _ok_rungs(theirs)
    outcomes, lines = [], []
    common = sorted(set(a) & set(b))
    for c in common:
        for figure, key, limit, upper in band.limits():
            interval = ratio_interval(a[c].get(key) or [], b[c].get(key) or [])
            if interval is None:
                outcomes.append(I_INCONCLUSIVE)
                lines.append(f"c={c}: {figure}: not measured by {'this engine' if not a[c].get(key) else 'the other'}")
                continue
            outcome = judge_ratio(interval, limit, upper)
            outcomes.append(outcome)
            lines.append(f"c={c}: {figure} {interval.text()} against {'<=' if upper else '>='} {limit:g}: {outcome}")
    return outcomes, lines, common


def _outcome(folded: str) -> str:
    return {I_FAIL: FAIL, I_INCONCLUSIVE: INCONCLUSIVE}.get(folded, PASS)


def _combined(parity: Band, regression: Band) -> Band:
    """The parity band widened by the run-to-run noise, for an oracle known only from its golden."""
    return Band(parity.min_output_tok_per_s_ratio * regression.min_output_tok_per_s_ratio,
                parity.max_ttft_ratio * regression.max_ttft_ratio, parity.max_tpot_ratio * regression.max_tpot_ratio,
                parity.max_itl_ratio * regression.max_itl_ratio)


def throughput_parity(obs: dict[str, Any], other: dict[str, Any] | None, case_spec: dict[str, Any], source: str,
                      same_run: bool) -> Verdict:
    """Per rung, output tok/s, TTFT, TPOT and ITL (p50 of each wave) as a ratio to the oracle's with a 95%
    interval over the repeated waves, against the case's parity band: pass when every interval is inside,
    fail when one lies wholly outside, else inconclusive. Measured in the same run on the same card
    (`same_run`) the parity band applies; against the oracle's golden, recorded in another run (even on
    this very card, runs of one engine moved by up to 15% at a rung), the band is widened by the regression
    band. Reads `throughput.rungs[*].*_repeats`."""
    spec = _spec(case_spec)
    mine, theirs = live_view(obs), live_view(other or {})
    diffs, _ = acceptance_differences(mine, theirs, spec)
    if diffs:
        return _verdict(THROUGHPUT, obs, INCONCLUSIVE, f"not compared: acceptance differs from {_name(other)} "
                        f"({diffs[0]}), so the two engines did unequal work per step", diffs)
    band = spec.parity if same_run else _combined(spec.parity, spec.regression)
    outcomes, lines, common = _compare_rungs(mine, theirs, band)
    if not common:
        return _verdict(THROUGHPUT, obs, FAIL, f"no rung measured by both this engine and {_name(other)} ({source})")
    outcome = _outcome(fold(outcomes))
    worst = [line for line, o in zip(lines, outcomes) if o == (I_FAIL if outcome == FAIL else I_INCONCLUSIVE)]
    how = "" if same_run else "another run: band widened by the run-to-run noise; "
    head = {PASS: "every rung inside the parity band", FAIL: f"{len(worst)} figure(s) outside the parity band",
            INCONCLUSIVE: f"{len(worst)} interval(s) straddle the parity band"}[outcome]
    return _verdict(THROUGHPUT, obs, outcome, f"{head} against {_name(other)} ({how}{source})"
                    + (f": {worst[0]}" if worst else ""), lines)


# --- against the engine's own golden ---------------------------------------------------------------

def card_kind(hardware: str | None) -> str:
    """'one NVIDIA H200 (139.8 GiB) [GPU-...], driver ..' -> 'NVIDIA H200 (139.8 GiB)'."""
    import re

    kind = re.split(r" \[GPU-|, driver |, torch |, CUDA ", hardware or "")[0]
    return re.sub(r"^(one|\d+ x) ", "", kind).strip()


def live_golden(obs: dict[str, Any], golden: dict[str, Any] | None, case_spec: dict[str, Any], is_oracle: bool,
                missing: str) -> Verdict:
    """An engine against its own live golden (did upstream move; did the engine regress): per rung the
    figures as ratios with intervals against the case's regression band, acceptance within tolerance.
    An oracle without a live golden fails; an engine under test without one is skipped (it is judged
    against the oracle). A golden of another card is not compared (skip, saying both cards)."""
    spec = _spec(case_spec)
    if golden is None:
        if is_oracle:
            return _verdict(GOLDEN, obs, FAIL, f"{missing}: record it on the profile's card with "
                            f"`pytest suites/live -m gpu --engines {obs['engine']['name']} --snapshot-update`")
        return _verdict(GOLDEN, obs, SKIP, f"no live golden ({missing}); judged against the oracle")
    mine, theirs = live_view(obs), live_view(golden)
    if card_kind(mine.get("hardware")) != card_kind(theirs.get("hardware")):
        return _verdict(GOLDEN, obs, SKIP, f"ran on {card_kind(mine.get('hardware'))!r}, the golden on "
                        f"{card_kind(theirs.get('hardware'))!r}: compared only as ratios measured in one run")
    version = (golden.get("engine") or {}).get("version")
    if version != obs["engine"].get("version"):
        return _verdict(GOLDEN, obs, FAIL, f"the live golden is of {golden['engine'].get('name')} {version}, this is "
                        f"{obs['engine'].get('version')}: re-record it with --snapshot-update after an intended move")
    diffs, _ = acceptance_differences(mine, theirs, spec)
    outcomes, lines, common = _compare_rungs(mine, theirs, spec.regression)
    if not common:
        return _verdict(GOLDEN, obs, FAIL, "no rung of the golden was measured in this run")
    if diffs:
        return _verdict(GOLDEN, obs, FAIL, f"acceptance moved from the golden: {diffs[0]}", diffs + lines)
    outcome = _outcome(fold(outcomes))
    worst = [line for line, o in zip(lines, outcomes) if o == (I_FAIL if outcome == FAIL else I_INCONCLUSIVE)]
    head = {PASS: "every rung inside the regression band of its golden",
            FAIL: f"{len(worst)} figure(s) outside the regression band of its golden",
            INCONCLUSIVE: f"{len(worst)} interval(s) straddle the regression band of its golden"}[outcome]
    return _verdict(GOLDEN, obs, outcome, head + (f": {worst[0]}" if worst else ""), lines)


# --- plan and run are one engine -------------------------------------------------------------------

def _same(name: str, printed: float, planned: float) -> bool:
    if name == "max_concurrency":
        return abs(printed - planned) <= MAX_CONCURRENCY_ABS_TOLERANCE + 0.005 * abs(planned)
    return printed == planned


def plan_matches_run(obs: dict[str, Any], case_spec: dict[str, Any]) -> Verdict:
    """What the engine printed when it started (`throughput.plan`, read by its manifest's startup regexes)
    equals what its own plan of the same case said (`throughput.plan_expected`, from its plan mode). Under
    a gpu_memory_utilization bound the figures that depend on the memory the engine measured at start
    (kv_cache_tokens, max_concurrency, num_blocks) are listed, not compared: a plan cannot know them."""
    view = live_view(obs)
    printed, planned = view.get("plan") or {}, view.get("plan_expected")
    if not printed:
        return _verdict(PLAN, obs, SKIP, "the engine's manifest reads no startup figures (startup_regexes)")
    throughput = obs.get("throughput")
    if isinstance(throughput, dict) and "plan_expected" not in throughput:
        return _verdict(PLAN, obs, SKIP, "the engine's own plan was not asked for (`conformance ladder` serves "
                        "without planning; `conformance run --live` and `pytest suites/live` plan it)")
    if planned is None:
        return _verdict(PLAN, obs, FAIL, "the engine's own plan of this case is missing (throughput.plan_expected): "
                        "plan mode and run mode cannot be compared")
    util = (case_spec.get("memory") or {}).get("gpu_memory_utilization") is not None
    diffs, same, listed = [], [], []
    for name, value in printed.items():
        want = planned.get(name)
        if name not in planned:
            continue
        if util and name in MEMORY_DEPENDENT_FIGURES:
            listed.append(f"{name}: printed {value}, planned {want} (not compared under gpu_memory_utilization)")
            continue
        if value is None:
            diffs.append(f"{name}: the startup line was not printed (planned {want})")
        elif want is None or not _same(name, value, want):
            diffs.append(f"{name}: printed {value}, its plan says {want}")
        else:
            same.append(f"{name}={value}")
    if diffs:
        return _verdict(PLAN, obs, FAIL, f"the startup lines disagree with the engine's own plan: {diffs[0]}",
                        diffs + listed)
    if not same:
        return _verdict(PLAN, obs, SKIP, "no startup figure comparable with the plan", listed)
    return _verdict(PLAN, obs, PASS, "startup figures equal the plan: " + ", ".join(same), listed)


# --- device memory ---------------------------------------------------------------------------------

def bound_of(view: dict[str, Any], util: float) -> tuple[int | None, str]:
    """util x the total the CUDA runtime reports (vLLM's definition: `gpu_memory_utilization x
    torch.cuda.mem_get_info()[1]`); NVML's total where the CUDA figure was not measured, said so."""
    cuda, nvml = view.get("cuda_total_bytes"), view.get("device_total_bytes")
    if cuda:
        return int(util * cuda), f"{util} x {units.human_bytes(cuda)} (the CUDA runtime's total)"
    if nvml:
        return int(util * nvml), f"{util} x {units.human_bytes(nvml)} (NVML's total; the CUDA runtime's not measured)"
    return None, ""


def overruns(view: dict[str, Any], util: float) -> dict[str, int]:
    """{phase: bytes over its bound (0 when inside)} of one view (empty when no bound is known)."""
    bound, _ = bound_of(view, util)
    if bound is None:
        return {}
    return {p: max(0, used - bound) for p, used in (view.get("footprint") or {}).items() if used is not None}


def overrun(view: dict[str, Any], util: float) -> tuple[int, str | None, int | None]:
    """(bytes over its bound at its worst phase (0 when inside), that phase, the bound) of one view."""
    bound, _ = bound_of(view, util)
    if bound is None:
        return 0, None, None
    worst, phase = 0, None
    for p, used in (view.get("footprint") or {}).items():
        if used is not None and used - bound > worst:
            worst, phase = used - bound, p
    return worst, phase, bound


def device_memory(obs: dict[str, Any], other: dict[str, Any] | None, case_spec: dict[str, Any], source: str,
                  is_oracle: bool, check: str = MEMORY) -> Verdict:
    """Bug 1 as an operator meets it: the NVML footprint of the engine's whole process tree (CUDA context
    included), per phase (idle, each rung), within gpu_memory_utilization x the CUDA runtime's total.
    An oracle over its own bound is a finding about the oracle. An engine under test may overrun, at
    each phase, by no more than the oracle did at that phase on the same case (its same-run observation,
    else its live golden; a phase the oracle did not measure gets the oracle's worst overrun); its
    footprint per phase is listed beside the oracle's. The same rule against SGLang (`check` =
    MEMORY_SGLANG): SGLang's bound is mem_fraction_static x the same total (its pools and weights are
    sized inside that fraction of the device; activations and graphs outside), so an engine under test
    is held to SGLang's overrun too."""
    util = (case_spec.get("memory") or {}).get("gpu_memory_utilization")
    if util is None:
        return _verdict(check, obs, SKIP, "the case bounds KV cache bytes, not the process: no whole-process bound")
    view = live_view(obs)
    bound, how = bound_of(view, util)
    footprint = {p: b for p, b in (view.get("footprint") or {}).items() if b is not None}
    if bound is None or not footprint:
        return _verdict(check, obs, SKIP, f"device memory not measured ({view.get('memory_source') or 'no live figures'})")
    theirs = live_view(other) if other else None
    details = []
    for p, b in footprint.items():
        line = f"{p}: {units.human_bytes(b)} ({b} B)"
        if theirs and (theirs.get("footprint") or {}).get(p) is not None:
            o = theirs["footprint"][p]
            line += f"; {_name(other)}: {units.human_bytes(o)} ({b - o:+d} B)"
        details.append(line)
    over, phase, _ = overrun(view, util)
    if is_oracle:
        if over > 0:
            return _verdict(check, obs, FINDING, f"finding about the oracle: its processes hold {units.human_bytes(footprint[phase])} "
                            f"at {phase}, over its own bound {how} = {units.human_bytes(bound)} by "
                            f"{units.human_bytes(over)} ({over} B); engines under test are held to no more than its overrun at each phase",
                            details)
        return _verdict(check, obs, PASS, f"peak {units.human_bytes(max(footprint.values()))} within {how} = "
                        f"{units.human_bytes(bound)}", details)
    allowed_over, oracle_phase, note = 0, None, "no oracle measurement to compare with"
    allowed: dict[str, int] = {}
    if theirs is not None:
        allowed_over, oracle_phase, _ = overrun(theirs, util)
        allowed = overruns(theirs, util)
        note = (f"{_name(other)} overruns its own bound by {units.human_bytes(allowed_over)} at {oracle_phase} "
                f"({source}): a finding about the oracle, allowed here, phase by phase" if allowed_over > 0
                else f"{_name(other)} stays inside its bound ({source})")
    # phase by phase: the same load on both engines; a phase the oracle did not measure gets its worst overrun
    worst = max(((p, o - allowed.get(p, allowed_over)) for p, o in overruns(view, util).items()),
                key=lambda x: x[1], default=(None, 0))
    if worst[1] > 0:
        p = worst[0]
        mine_over = footprint[p] - bound
        theirs_at = allowed.get(p, allowed_over)
        return _verdict(check, obs, FAIL, f"the engine's processes hold {units.human_bytes(footprint[p])} at {p}, "
                        f"over {how} = {units.human_bytes(bound)} by {units.human_bytes(mine_over)} ({mine_over} B) where "
                        f"the oracle's overrun at {p} is {units.human_bytes(theirs_at)}; {note}"
                        f" (NVML, CUDA context included; throughput.live.by_phase)", details)
    return _verdict(check, obs, PASS, f"peak {units.human_bytes(max(footprint.values()))} within {how} = "
                    f"{units.human_bytes(bound)}" + (f" plus the oracle's overrun at each phase ({note})" if allowed_over
                                                     else f"; {note}"), details)



# --- against SGLang: the running requests it admits --------------------------------------------

def running_not_below_oracle(obs: dict[str, Any], other: dict[str, Any] | None, source: str,
                             check: str = RUNNING_SGLANG) -> Verdict:
    """The requests an engine runs at once, rung by rung, are at least as many as the oracle actually
    admitted at that rung (its running-requests gauge, sampled through the rung; SGLang's scheduler caps
    them by its mamba state slots and its pools, so what it admits live is the figure to meet, beside the
    planned max_active_seqs that `budget.active_seqs_not_below_sglang` compares). Reads
    `throughput.live.by_phase[c=N].max_running_requests` of both. An open-loop ladder holds no fixed
    number in flight: skipped."""
    if ((obs.get("throughput") or {}).get("live") or {}).get("mode") == "open":
        return _verdict(check, obs, SKIP, "open-loop ladder: no rung holds a fixed concurrency")
    mine = live_view(obs).get("max_running_requests") or {}
    theirs = live_view(other or {}).get("max_running_requests") or {}
    common = [p for p in mine if p.startswith("c=") and mine[p] is not None and theirs.get(p) is not None]
    if not common:
        why = "this engine exposes no running-requests gauge" if not any(v is not None for v in mine.values()) \
            else f"no rung where both this engine and {_name(other)} ({source}) measured it"
        return _verdict(check, obs, SKIP, f"running requests not compared: {why}")
    common.sort(key=lambda p: int(p[2:]))
    lines = [f"{p}: {mine[p]} at once; {_name(other)}: {theirs[p]}" for p in common]
    short = [p for p in common if mine[p] < theirs[p]]
    if short:
        p = short[0]
        return _verdict(check, obs, FAIL, f"at most {mine[p]} requests ran at once at {p}, where {_name(other)} "
                        f"({source}) admitted {theirs[p]}: the engine seats fewer than the oracle runs", lines)
    return _verdict(check, obs, PASS, f"at every rung at least as many requests at once as {_name(other)} "
                    f"({source}): " + ", ".join(f"{p} {mine[p]}" for p in common), lines)


# --- the two oracles beside each other ----------------------------------------------------------

def _both_ways(band: Band) -> list[tuple[str, str, float, bool]]:
    """Each limit of `band` and its mirror: two oracles agree when each ratio lies between them."""
    out = []
    for figure, key, limit, upper in band.limits():
        out += [(figure, key, limit, upper), (figure, key, 1.0 / limit, not upper)]
    return out


def oracles_agree(obs: dict[str, Any], other: dict[str, Any] | None, case_spec: dict[str, Any], source: str,
                  same_run: bool) -> Verdict:
    """An oracle beside the oracle others are compared with (SGLang beside vLLM), rung by rung: the mean
    acceptance length within the case's tolerance, and output tok/s, TTFT, TPOT and ITL (p50 of each
    wave) as ratios with 95% intervals inside the parity band taken both ways (tok/s within [0.9, 1/0.9]
    by default). An interval wholly outside is a `finding` about the oracles: they disagree by more than
    the noise, which says nothing against an engine under test (judged against each oracle's own rows);
    one straddling a limit is inconclusive; all inside pass. Against the other oracle's golden, recorded
    in another run, the band is widened by the regression band. The oracle compared with itself: skip."""
    if other is None or (other.get("engine") or {}).get("name") == obs["engine"]["name"]:
        return _verdict(ORACLES_AGREE, obs, SKIP, "the oracle the others are compared with" if other is not None
                        else f"no figures of the other oracle ({source})")
    spec = _spec(case_spec)
    mine, theirs = live_view(obs), live_view(other)
    a, b = _ok_rungs(mine), _ok_rungs(theirs)
    common = sorted(set(a) & set(b))
    if not common:
        return _verdict(ORACLES_AGREE, obs, SKIP, f"no rung measured by both this oracle and {_name(other)} ({source})")
    band = spec.parity if same_run else _combined(spec.parity, spec.regression)
    disagree, straddle, lines = [], [], []
    for c in common:
        la, lb = a[c].get("mean_acceptance_length"), b[c].get("mean_acceptance_length")
        if la is not None and lb is not None and abs(la - lb) > spec.acceptance_mean_tolerance:
            disagree.append(f"c={c}: mean acceptance length {la:.3f} vs {lb:.3f}")
        for figure, key, limit, upper in _both_ways(band):
            interval = ratio_interval(a[c].get(key) or [], b[c].get(key) or [])
            if interval is None:
                continue
            outcome = judge_ratio(interval, limit, upper)
            if outcome == I_FAIL:
                disagree.append(f"c={c}: {figure} {interval.text()} beyond {limit:.3g}")
            elif outcome == I_INCONCLUSIVE:
                straddle.append(f"c={c}: {figure} {interval.text()} straddles {limit:.3g}")
        r = ratio_interval(a[c].get("output_tok_per_s") or [], b[c].get("output_tok_per_s") or [])
        lines.append(f"c={c}: output tok/s {r.text() if r else '-'} of {_name(other)}")
    how = "same run" if same_run else "another run: band widened by the run-to-run noise"
    if disagree:
        return _verdict(ORACLES_AGREE, obs, FINDING, f"finding about the oracles: {_name(obs)} and {_name(other)} "
                        f"disagree by more than the noise on {len(disagree)} figure(s) ({how}; {source}): "
                        f"{disagree[0]}; engines under test are judged against each oracle's own rows",
                        disagree + straddle + lines)
    if straddle:
        return _verdict(ORACLES_AGREE, obs, INCONCLUSIVE, f"{len(straddle)} interval(s) straddle the parity band "
                        f"taken both ways against {_name(other)} ({how}; {source}): {straddle[0]}", straddle + lines)
    return _verdict(ORACLES_AGREE, obs, PASS, f"within the parity band both ways of {_name(other)} at every rung "
                    f"({how}; {source})", lines)
