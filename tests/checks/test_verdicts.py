"""conformance.checks: each suite rule as a pure function, on small hand-built observations."""

from __future__ import annotations

import copy

from conformance.checks.budget import active_seqs_not_below_sglang, budget_parity_with_vllm
from conformance.checks.check_table import CHECKS
from conformance.checks.golden import golden_verdict
from conformance.checks.goldens import golden_view
from conformance.checks.memory import inside_the_bound, ledger_holds_seats, per_sequence_equals_vllm, seats_equal_vllm
from conformance.checks.row import CheckInput
from conformance.checks.trace import steps_within_budget, trace_equals_vllm
from conformance.documents import observation

SPEC = {"id": "c", "memory": {"kv_cache_bytes": 1000}}


def obs(engine="reference", *, bound=1000, ledger=None, outside=(), steps=(100, 50), max_scheduled=100, seats=4.0,
        active=8, version="1.0"):
    o = observation.new("c", engine, version, "plan", "h200")
    o["budget"] = {"max_num_batched_tokens": 100, "max_num_scheduled_tokens": max_scheduled,
                   "drafting_slots_per_request": 0, "lookahead_tokens": 9, "max_num_seqs": 8, "max_active_seqs": active}
    o["memory"] = {"bound_bytes": bound, "ledger_bytes": ledger or {"attention_kv": 300, "recurrent_state": 300,
                                                                     "draft_kv": 300, "weights": 5000},
                   "outside_bound": list(outside), "per_sequence": {"attention_kv_bytes": 1, "recurrent_state_bytes": 1,
                                                                    "draft_kv_bytes": 1, "state_slots": 9},
                   "pool": {"num_blocks": 1, "block_size_tokens": 16, "page_size_bytes": 1, "unified": True},
                   "max_concurrency": seats}
    o["trace"] = {"steps": [{"total_num_scheduled_tokens": t, "num_scheduled_requests": 2, "num_spec_tokens": 0,
                             "num_preempted": 0} for t in steps]}
    return observation.validate(o, "test")


def refused(engine):
    return observation.failed("c", engine, "1.0", "plan", "h200", "refused", "no room")


def test_budget_parity():
    assert budget_parity_with_vllm(CheckInput(obs(), SPEC, obs("vllm"), "s")).outcome == "pass"
    v = budget_parity_with_vllm(CheckInput(obs(max_scheduled=90), SPEC, obs("vllm"), "s"))
    assert v.failed and any("max_num_scheduled_tokens" in d for d in v.details)
    assert budget_parity_with_vllm(CheckInput(obs(), SPEC, refused("vllm"), "s")).failed
    assert budget_parity_with_vllm(CheckInput(refused("reference"), SPEC, refused("vllm"), "s")).outcome == "pass"
    spec = dict(SPEC, intended_differences=[{"oracle": "vllm", "engines": ["reference"], "field": "max_num_scheduled_tokens",
                                             "expected": 90, "reason": "x"}])
    assert budget_parity_with_vllm(CheckInput(obs(max_scheduled=90), spec, obs("vllm"), "s")).outcome == "pass"
    assert budget_parity_with_vllm(CheckInput(obs(max_scheduled=91), spec, obs("vllm"), "s")).failed  # not the documented value
    status = dict(SPEC, intended_differences=[{"oracle": "vllm", "engines": ["reference"], "field": "status", "expected": "refused",
                                               "reason": "k past the drafter's block"}])
    assert budget_parity_with_vllm(CheckInput(refused("reference"), status, obs("vllm"), "s")).outcome == "pass"
    assert budget_parity_with_vllm(CheckInput(obs(), status, obs("vllm"), "s")).failed                  # not what it documents
    assert budget_parity_with_vllm(CheckInput(refused("reference"), status, refused("vllm"), "s")).failed  # stale entry


def test_active_seqs_and_seats():
    # memory admits min(max_num_seqs 8, floor(seats)); a token-budget cap (active) does not count
    assert active_seqs_not_below_sglang(CheckInput(obs(seats=8.5, active=2), SPEC, obs("sglang", active=8), "s")).outcome == "pass"
    assert active_seqs_not_below_sglang(CheckInput(obs(seats=6.9), SPEC, obs("sglang", active=7), "s")).failed
    assert active_seqs_not_below_sglang(CheckInput(obs(), SPEC, refused("sglang"), "s")).outcome == "skip"
    doc = dict(SPEC, intended_differences=[{"oracle": "sglang", "engines": ["reference"], "field": "max_active_seqs", "expected": 6,
                                            "reason": "SGLang caps by state slots"}])
    assert active_seqs_not_below_sglang(CheckInput(obs(seats=6.9), doc, obs("sglang", active=7), "s")).outcome == "pass"
    assert active_seqs_not_below_sglang(CheckInput(obs(seats=5.9), doc, obs("sglang", active=7), "s")).failed  # not the value
    assert active_seqs_not_below_sglang(CheckInput(obs(seats=6.9), doc, obs("sglang", active=6), "s")).failed  # stale
    assert seats_equal_vllm(CheckInput(obs(seats=4.0), SPEC, obs("vllm", seats=4.0), "s")).outcome == "pass"
    v = seats_equal_vllm(CheckInput(obs(seats=3.5), SPEC, obs("vllm", seats=4.0), "s"))
    assert v.failed and "fewer" in v.message and "-0.5 seats" in v.message
    v = seats_equal_vllm(CheckInput(obs(seats=5.0), SPEC, obs("vllm", seats=4.0), "s"))   # more seats: something not counted
    assert v.failed and "not counted" in v.message
    seats = dict(SPEC, intended_differences=[{"oracle": "vllm", "engines": ["reference"], "field": "memory.max_concurrency", "expected": 3.5,
                                              "reason": "vLLM packs its pages otherwise on this device"}])
    assert seats_equal_vllm(CheckInput(obs(seats=3.5), seats, obs("vllm", seats=4.0), "s")).outcome == "pass"
    assert seats_equal_vllm(CheckInput(obs(seats=3.0), seats, obs("vllm", seats=4.0), "s")).failed   # not the documented value
    v = seats_equal_vllm(CheckInput(obs(seats=3.5), seats, obs("vllm", seats=3.5), "s"))           # stale entry
    assert v.failed and "no longer exists" in v.message


def test_per_sequence_and_ledger_holding_the_seats():
    assert per_sequence_equals_vllm(CheckInput(obs(), SPEC, obs("vllm"), "s")).outcome == "pass"
    low = obs()
    low["memory"]["per_sequence"]["state_slots"] = 8
    v = per_sequence_equals_vllm(CheckInput(low, SPEC, obs("vllm"), "s"))
    assert v.failed and "memory.per_sequence.state_slots: vLLM 9, reference 8" in v.message
    assert ledger_holds_seats(CheckInput(obs(), SPEC)).outcome == "pass"          # 4 seats x 3 B within 900 B
    hidden = obs(ledger={"attention_kv": 3, "recurrent_state": 3, "draft_kv": 0, "weights": 5000})
    v = ledger_holds_seats(CheckInput(hidden, SPEC))                               # 4 x 3 B = 12 B > 6 B held
    assert v.failed and "short by 6 B" in v.message


def test_inside_the_bound():
    assert inside_the_bound(CheckInput(obs(), SPEC)).outcome == "pass"          # weights are not under a KV-bytes bound
    assert inside_the_bound(CheckInput(obs(outside=("draft_kv",)), SPEC)).failed
    assert inside_the_bound(CheckInput(obs(bound=899), SPEC)).failed
    gpu = {"id": "c", "memory": {"gpu_memory_utilization": 0.9}}
    assert inside_the_bound(CheckInput(obs(bound=6000), gpu)).outcome == "pass"
    v = inside_the_bound(CheckInput(obs(bound=5000), gpu))                   # with gpu_memory_utilization, weights count
    assert v.failed and "by 900 B" in v.message
    assert inside_the_bound(CheckInput(refused("reference"), SPEC)).outcome == "skip"


def test_trace_checks():
    assert steps_within_budget(CheckInput(obs(), {}, None, "s")).outcome == "pass"
    v = steps_within_budget(CheckInput(obs(steps=(100, 101)), {}, None, "s"))
    assert v.failed and v.details[0].startswith("step 1:")
    reserving = obs("vllm")
    reserving["budget"]["drafting_slots_per_request"] = 8     # pard: vLLM charges 2 x 8 slots on top of 100
    v = steps_within_budget(CheckInput(obs(steps=(90, 50)), {}, reserving, "s"))
    assert v.failed and "8 drafting slots x 2 requests = 106 tokens" in v.message and "by 6 tokens" in v.message
    assert trace_equals_vllm(CheckInput(obs(), SPEC, obs("vllm"), "s")).outcome == "pass"
    v = trace_equals_vllm(CheckInput(obs(steps=(100, 40)), SPEC, obs("vllm"), "s"))
    assert v.failed and "first at step 1" in v.message
    assert trace_equals_vllm(CheckInput(obs(steps=(100, 50, 1)), SPEC, obs("vllm"), "s")).failed


def test_golden_verdict():
    live = obs("vllm")
    golden = golden_view(live, ["budget"])
    assert golden_verdict("budget", live, golden, "g", True).outcome == "pass"
    moved = copy.deepcopy(live)
    moved["budget"]["lookahead_tokens"] = 10
    v = golden_verdict("budget", moved, golden, "g", True)
    assert v.failed and any(d.startswith("budget.lookahead_tokens") for d in v.details)
    v = golden_verdict("budget", obs("vllm", version="2.0"), golden, "g", True)
    assert v.failed and "re-record" in v.message
    v = golden_verdict("budget", live, None, "g", True, "no golden here")
    assert v.failed and v.cause == "missing-golden"
    # an engine under test without a golden is judged against the oracles: skipped, never told to record
    v = golden_verdict("budget", obs("port"), None, "g", False, "no golden here")
    assert v.outcome == "skip" and "snapshot-update" not in v.message and "record" not in v.message
    assert golden_verdict("budget", live, dict(golden, engine=None), "g", True).failed   # a null engine: no crash


def test_check_table_is_keyed_by_role_not_name():
    names = {c.name: c for c in CHECKS}
    for check in CHECKS:   # an engine under test by any name is judged by every non-golden check
        assert check.applies("under-test", "tiny-x") or check.case_globs != ("*",), check.name
        assert "reference" not in check.judges
    assert names["trace.equals_vllm"].applies("under-test", "seed-x")     # every case, not only tiny-*
    assert not names["memory.inside_bound"].applies("oracle", "seed-x")
    assert names["budget.golden"].applies("oracle", "seed-x") and names["budget.golden"].applies("under-test", "x")


def test_unified_pool_seats():
    from conformance.checks.memory import unified_pool_seats

    assert unified_pool_seats(CheckInput(obs(seats=36.0, active=32), dict(SPEC, scheduler={"max_num_seqs": 32}), obs("vllm", seats=36.0), "s")).outcome == "pass"
    assert unified_pool_seats(CheckInput(obs(seats=20.0, active=32), dict(SPEC, scheduler={"max_num_seqs": 32}), obs("vllm", seats=36.0), "s")).failed
    assert unified_pool_seats(CheckInput(obs(seats=36.0, active=28), dict(SPEC, scheduler={"max_num_seqs": 32}), obs("vllm", seats=36.0), "s")).failed
    split = obs(seats=36.0, active=32)      # two pools carved from one bound (SGLang's shape): the outcome counts
    split["memory"]["pool"]["unified"] = False
    assert unified_pool_seats(CheckInput(split, dict(SPEC, scheduler={"max_num_seqs": 32}), obs("vllm", seats=36.0), "s")).outcome == "pass"
    beside = obs(seats=36.0, active=32, outside=("recurrent_state",))   # the second pool outside the bound
    beside["memory"]["pool"]["unified"] = False
    assert unified_pool_seats(CheckInput(beside, dict(SPEC, scheduler={"max_num_seqs": 32}), obs("vllm", seats=36.0), "s")).failed
    # the case itself is wrong when vLLM has no room for 32
    assert unified_pool_seats(CheckInput(obs(seats=36.0, active=32), dict(SPEC, scheduler={"max_num_seqs": 32}), obs("vllm", seats=20.0), "s")).failed


def test_draft_kv_scaling():
    from conformance.checks.memory import draft_kv_scaling

    def sized(seqs, per_draft=10, bound=1000, outside=()):
        o = obs(bound=bound, outside=outside)
        o["budget"]["max_num_seqs"] = seqs
        o["memory"]["per_sequence"].update(attention_kv_bytes=10, recurrent_state_bytes=5, draft_kv_bytes=per_draft)
        return o

    v = draft_kv_scaling(CheckInput(sized(8), SPEC, partner=sized(32)))
    assert v.outcome == "pass" and "draft KV 80 B" in v.message and "draft KV 320 B" in v.message
    assert draft_kv_scaling(CheckInput(sized(8), SPEC, partner=sized(32, bound=500))).failed          # 32 x 25 B over the bound
    assert draft_kv_scaling(CheckInput(sized(8), SPEC, partner=sized(32, per_draft=11))).failed       # per-sequence cost differs
    assert draft_kv_scaling(CheckInput(sized(8), SPEC, partner=sized(32, outside=("draft_kv",)))).failed
    assert draft_kv_scaling(CheckInput(sized(8), SPEC, partner=sized(8))).failed                       # nothing grows


def test_trace_documented_difference_after_preemption():
    def traced(engine, rows):
        o = obs(engine)
        o["trace"]["steps"] = [{"total_num_scheduled_tokens": t, "num_scheduled_requests": 1, "num_spec_tokens": 0,
                                "num_preempted": p} for t, p in rows]
        return o

    vllm = traced("vllm", [(100, 0), (50, 1), (10, 0)])
    spec = dict(SPEC, intended_differences=[{"oracle": "vllm", "engines": ["reference"], "field": "trace",
                                             "expected": "equal_until_first_preemption", "reason": "no prefix cache"}])
    assert trace_equals_vllm(CheckInput(traced("reference", [(100, 0), (50, 1), (60, 0)]), spec, vllm, "s")).outcome == "pass"
    assert trace_equals_vllm(CheckInput(traced("reference", [(100, 0), (40, 1), (10, 0)]), spec, vllm, "s")).failed  # too early
    assert trace_equals_vllm(CheckInput(traced("reference", [(100, 0), (50, 1), (10, 0)]), spec, vllm, "s")).failed  # stale
    assert trace_equals_vllm(CheckInput(traced("reference", [(100, 0), (50, 1), (60, 0)]), SPEC, vllm, "s")).failed  # undeclared


def test_explains_short_seats():
    from conformance.checks.memory import explains_short_seats

    short = obs(seats=5.5)
    short["message"] = "the pool seats 5 full-length sequences (max_num_seqs 8): each needs ..."
    assert explains_short_seats(CheckInput(short, {})).outcome == "pass"
    silent = obs(seats=5.5)
    assert explains_short_seats(CheckInput(silent, {})).failed
    wrong = obs(seats=5.5)
    wrong["message"] = "the pool seats 7 full-length sequences"
    assert explains_short_seats(CheckInput(wrong, {})).failed
    assert explains_short_seats(CheckInput(obs(seats=9.0), {})).outcome == "skip"


def _run_obs(peaks: dict, running: dict, total=100_000, top="c=4"):
    o = observation.new("c", "port", "1", "run", "h200")
    o["throughput"] = {"rungs": [], "live": {"source": "nvml", "device_total_bytes": total, "top_rung": top, "notes": [],
                                             "by_phase": {p: {"peak_device_bytes": peaks.get(p),
                                                              "max_running_requests": running.get(p), "num_samples": 5}
                                                          for p in set(peaks) | set(running)}}}
    return o


def test_live_checks():
    from conformance.checks.live_checks import device_memory
    from conformance.checks.live import live_concurrency_served

    util = {"id": "c", "memory": {"gpu_memory_utilization": 0.5}, "scheduler": {"max_num_seqs": 4}}
    assert device_memory(_run_obs({"idle": 40_000, "c=4": 49_000}, {}), None, util, "", False).outcome == "pass"
    v = device_memory(_run_obs({"idle": 40_000, "c=4": 51_000}, {}), None, util, "", False)
    assert v.failed and "over 0.5 x" in v.message and "(1000 B)" in v.message
    kv = {"id": "c", "memory": {"kv_cache_bytes": 1}, "scheduler": {"max_num_seqs": 4}}
    assert device_memory(_run_obs({"c=4": 99_999}, {}), None, kv, "", False).outcome == "skip"
    assert live_concurrency_served(CheckInput(_run_obs({}, {"c=4": 4}), util)).outcome == "pass"
    v = live_concurrency_served(CheckInput(_run_obs({}, {"c=4": 3}), util))          # seats fewer than max_num_seqs
    assert v.failed and "at most 3 requests" in v.message
    assert live_concurrency_served(CheckInput(_run_obs({}, {"c=4": 5}), util)).failed  # more than max_num_seqs
    assert live_concurrency_served(CheckInput(_run_obs({}, {}), util)).outcome == "skip"
