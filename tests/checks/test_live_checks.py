"""The live checks as pure functions of documents (conformance.checks.live_checks) and through the table
(check_table.judge_live): each check's pass, fail, inconclusive, finding and skip."""

from __future__ import annotations

from typing import Any

from conformance.checks import live_checks as lc
from conformance.checks.check_table import judge_live
from conformance.documents import observation
from conformance.documents.golden_doc import GoldenMissingError
from conformance.pytest_plugin.live_golden import live_golden_doc

HW = "one NVIDIA H200 (139.8 GiB) [GPU-1111], driver 580, CUDA 13.0, torch 2.11"
CASE = {"id": "c", "scheduler": {"max_num_seqs": 4, "max_model_len": 1000}, "memory": {"gpu_memory_utilization": 0.5},
        "live": {"device": "cuda", "concurrencies": [1, 4], "num_repeats": 3}}


def run_obs(engine: str = "port", scale: float = 1.0, latency: float = 1.0, accept: float = 4.0,
            per_pos: list[float] | None = (1.0, 1.0, 1.0, 0.0), footprint: dict[str, int] | None = None,
            hardware: str = HW, plan: dict | None = None, plan_expected: dict | None = None,
            version: str = "1") -> dict[str, Any]:
    o = observation.new("c", engine, version, "run", "h200")
    o["device"]["hardware"] = hardware
    rungs = []
    for c in (1, 4):
        rungs.append({"concurrency": c, "status": "ok", "output_tok_per_s": 100 * c * scale,
                      "output_tok_per_s_repeats": [100 * c * scale * f for f in (0.99, 1.0, 1.01)],
                      "ttft_ms_median_repeats": [50 * latency * f for f in (0.99, 1.0, 1.01)],
                      "tpot_ms_median_repeats": [5 * latency * f for f in (0.99, 1.0, 1.01)],
                      "itl_ms_median_repeats": [10 * latency * f for f in (0.99, 1.0, 1.01)],
                      "mean_acceptance_length": accept, "accepted_per_pos": list(per_pos) if per_pos else None})
    by_phase = {p: {"peak_device_bytes": b, "max_running_requests": None, "num_samples": 5}
                for p, b in (footprint or {"idle": 40_000, "c=4": 45_000}).items()}
    o["throughput"] = {"rungs": rungs, "plan": plan or {}, "plan_expected": plan_expected,
                       "live": {"source": "nvml", "device_total_bytes": 101_000, "cuda_total_bytes": 100_000,
                                "by_phase": by_phase, "top_rung": "c=4", "mode": "closed", "notes": []}}
    return o


def test_acceptance_equal_passes_and_a_different_mean_or_position_fails():
    vllm = run_obs("vllm")
    assert lc.acceptance_equals_oracle(run_obs(), vllm, CASE, "s").outcome == "pass"
    v = lc.acceptance_equals_oracle(run_obs(accept=3.0, per_pos=[1.0, 1.0, 0.0, 0.0]), vllm, CASE, "s")
    assert v.failed and "3.000 vs 4.000" in v.message and any("position 2" in d for d in v.details)
    v = lc.acceptance_equals_oracle(run_obs(per_pos=None), vllm, CASE, "s")
    assert v.failed and "per-position" in v.message


def test_throughput_same_card_pass_fail_and_inconclusive():
    vllm = run_obs("vllm")
    assert lc.throughput_parity(run_obs(), vllm, CASE, "s", True).outcome == "pass"
    slow = lc.throughput_parity(run_obs(scale=0.75, latency=1 / 0.75), vllm, CASE, "s", True)
    assert slow.failed and "outside the parity band" in slow.message
    noisy = run_obs(scale=0.92)
    for r in noisy["throughput"]["rungs"]:
        r["output_tok_per_s_repeats"] = [r["output_tok_per_s"] * f for f in (0.8, 1.0, 1.2)]
    assert lc.throughput_parity(noisy, vllm, CASE, "s", True).outcome == "inconclusive"


def test_throughput_against_another_card_widens_the_band_and_unequal_acceptance_is_not_compared():
    vllm = run_obs("vllm")
    assert lc.throughput_parity(run_obs(scale=0.8, latency=1.2), vllm, CASE, "s", True).failed
    assert lc.throughput_parity(run_obs(scale=0.8, latency=1.2), vllm, CASE, "s", False).outcome == "pass"
    v = lc.throughput_parity(run_obs(accept=3.0), vllm, CASE, "s", True)
    assert v.outcome == "inconclusive" and "acceptance differs" in v.message


def test_live_golden_missing_other_card_other_version_and_a_regression():
    me = run_obs("vllm")
    assert lc.live_golden(me, None, CASE, True, "no golden").failed
    assert lc.live_golden(me, None, CASE, False, "no golden").outcome == "skip"
    golden = live_golden_doc(run_obs("vllm"))
    assert lc.live_golden(me, golden, CASE, True, "").outcome == "pass"
    other_card = live_golden_doc(run_obs("vllm", hardware="one NVIDIA H100 (79.2 GiB) [GPU-2], driver 580"))
    assert lc.live_golden(me, other_card, CASE, True, "").outcome == "skip"
    assert lc.live_golden(run_obs("vllm", version="2"), golden, CASE, True, "").failed
    assert lc.live_golden(run_obs("vllm", scale=0.5, latency=2.0), golden, CASE, True, "").failed


def test_plan_matches_run_compares_memory_figures_only_under_a_kv_bound():
    plan = {"kv_cache_tokens": 5000, "max_concurrency": 5.0, "max_num_scheduled_tokens": 256}
    same = run_obs(plan=plan, plan_expected=dict(plan))
    kv_case = dict(CASE, memory={"kv_cache_bytes": 1 << 26})
    assert lc.plan_matches_run(same, kv_case).outcome == "pass"
    lying = run_obs(plan=dict(plan, kv_cache_tokens=10000), plan_expected=dict(plan))
    v = lc.plan_matches_run(lying, kv_case)
    assert v.failed and "kv_cache_tokens: printed 10000, its plan says 5000" in v.message
    assert lc.plan_matches_run(lying, CASE).outcome == "pass"                 # under utilization: listed only
    assert lc.plan_matches_run(run_obs(plan=plan), kv_case).failed            # no plan of its own
    assert lc.plan_matches_run(run_obs(), kv_case).outcome == "skip"          # prints nothing


def test_device_memory_each_oracle_way_with_its_overrun_as_a_finding():
    # bound 0.5 x the CUDA runtime's total 100_000 = 50_000 (NVML's 101_000 would give 50_500)
    vllm_over = run_obs("vllm", footprint={"idle": 49_000, "c=4": 50_400})
    finding = lc.device_memory(vllm_over, None, CASE, "", True)
    assert finding.outcome == "finding" and "finding about the oracle" in finding.message and "(400 B)" in finding.message
    inside = lc.device_memory(run_obs(footprint={"c=4": 50_300}), vllm_over, CASE, "s", False)
    assert inside.outcome == "pass" and "overrun" in inside.message
    beyond = lc.device_memory(run_obs(footprint={"c=4": 50_500}), vllm_over, CASE, "s", False)
    assert beyond.failed and "(500 B)" in beyond.message
    assert lc.device_memory(run_obs(footprint={"c=4": 50_300}), run_obs("vllm"), CASE, "s", False).failed


def test_device_memory_holds_an_engine_to_the_oracle_s_overrun_phase_by_phase():
    """The seed bug's store beside the pool shows at a phase where the oracle is inside its bound, though it
    stays under the oracle's worst overrun (one H200: the port held 119.21 GiB at c = 8, where vLLM held
    118.94, 0.11 GiB over its 118.83 GiB bound; vLLM's worst was 119.95 at c = 32): the same load is
    compared with the same load."""
    vllm = run_obs("vllm", footprint={"idle": 49_000, "c=1": 49_500, "c=4": 50_400})
    store_beside = run_obs(footprint={"idle": 49_800, "c=1": 50_200, "c=4": 50_300})
    v = lc.device_memory(store_beside, vllm, CASE, "s", False)
    assert v.failed and "at c=1" in v.message and "(200 B)" in v.message and "overrun at c=1 is 0 B" in v.message
    sound = run_obs(footprint={"idle": 48_000, "c=1": 49_900, "c=4": 50_350})
    assert lc.device_memory(sound, vllm, CASE, "s", False).outcome == "pass"
    # a phase the oracle did not measure is held to the oracle's worst overrun
    unseen = run_obs(footprint={"c=8": 50_300})
    assert lc.device_memory(unseen, vllm, CASE, "s", False).outcome == "pass"
    assert lc.device_memory(run_obs(footprint={"c=8": 50_500}), vllm, CASE, "s", False).failed


def _missing(suite, engine, case_id):
    raise GoldenMissingError(f"no {engine} golden")


def test_judge_live_takes_the_oracle_of_this_run_and_keys_checks_by_role():
    vllm = run_obs("vllm")
    verdicts = {v.check: v for v in judge_live(run_obs(scale=0.7, latency=1.4), CASE, "under-test", _missing,
                                               lambda e, c: vllm if e == "vllm" else None)}
    assert verdicts["live.throughput_parity_vllm"].failed
    assert "measured in this run" in verdicts["live.throughput_parity_vllm"].message
    assert verdicts["live.acceptance_equals_vllm"].outcome == "pass"
    oracle = {v.check for v in judge_live(vllm, CASE, "oracle", _missing)}
    assert oracle == {"live.golden", "live.device_memory_within_bound", "live.concurrency_served", "live.oracles_agree"}
    none = {v.check: v for v in judge_live(run_obs(), CASE, "under-test", _missing)}
    assert none["live.throughput_parity_vllm"].failed and "nothing to compare with" in none["live.throughput_parity_vllm"].message
    cpu = dict(CASE, live=dict(CASE["live"], device="cpu"))
    assert {v.outcome for v in judge_live(run_obs(), cpu, "under-test", _missing)
            if v.check.endswith("_vllm")} == {"skip"}


def _running(o: dict[str, Any], by_phase: dict[str, int | None]) -> dict[str, Any]:
    for p, n in by_phase.items():
        o["throughput"]["live"]["by_phase"].setdefault(p, {"peak_device_bytes": None, "num_samples": 5})
        o["throughput"]["live"]["by_phase"][p]["max_running_requests"] = n
    return o


def test_running_requests_not_below_what_the_oracle_admits():
    sglang = _running(run_obs("sglang"), {"c=1": 1, "c=4": 4})
    assert lc.running_not_below_oracle(_running(run_obs(), {"c=1": 1, "c=4": 4}), sglang, "s").outcome == "pass"
    short = lc.running_not_below_oracle(_running(run_obs(), {"c=1": 1, "c=4": 3}), sglang, "s")
    assert short.failed and "at most 3 requests ran at once at c=4" in short.message and "admitted 4" in short.message
    # an oracle that admits fewer (its mamba cap) is the figure to meet, not the concurrency asked
    capped = _running(run_obs("sglang"), {"c=1": 1, "c=4": 2})
    assert lc.running_not_below_oracle(_running(run_obs(), {"c=1": 1, "c=4": 2}), capped, "s").outcome == "pass"
    assert lc.running_not_below_oracle(run_obs(), sglang, "s").outcome == "skip"      # no gauge of its own


def test_the_oracles_beside_each_other_are_a_finding_when_they_disagree():
    vllm = run_obs("vllm")
    assert lc.oracles_agree(run_obs("sglang"), vllm, CASE, "s", True).outcome == "pass"
    faster = lc.oracles_agree(run_obs("sglang", scale=1.4, latency=0.6), vllm, CASE, "s", True)
    assert faster.outcome == "finding" and "finding about the oracles" in faster.message
    assert "output tok/s 1.400 x" in faster.message
    other_acceptance = lc.oracles_agree(run_obs("sglang", accept=3.0), vllm, CASE, "s", True)
    assert other_acceptance.outcome == "finding" and "mean acceptance length 3.000 vs 4.000" in other_acceptance.message
    noisy = run_obs("sglang", scale=1.1)
    for r in noisy["throughput"]["rungs"]:
        r["output_tok_per_s_repeats"] = [x * f for x, f in zip(r["output_tok_per_s_repeats"], (0.7, 1.0, 1.4))]
    assert lc.oracles_agree(noisy, vllm, CASE, "s", True).outcome == "inconclusive"
    # against the other oracle's golden (another run) the band is widened: 1.4x is noise there
    assert lc.oracles_agree(run_obs("sglang", scale=1.4), vllm, CASE, "s", False).outcome == "pass"
    assert lc.oracles_agree(vllm, vllm, CASE, "s", True).outcome == "skip"


def test_device_memory_against_sglang_holds_an_engine_to_sglang_s_overrun():
    sglang = run_obs("sglang", footprint={"idle": 50_200, "c=4": 50_200})     # 200 B over from idle on
    v = lc.device_memory(run_obs(footprint={"c=4": 50_300}), sglang, CASE, "s", False, check=lc.MEMORY_SGLANG)
    assert v.check == lc.MEMORY_SGLANG and v.failed and "overrun at c=4 is 200 B" in v.message
    assert lc.device_memory(run_obs(footprint={"c=4": 50_150}), sglang, CASE, "s", False,
                            check=lc.MEMORY_SGLANG).outcome == "pass"


def test_judge_live_judges_against_both_oracles():
    vllm, sglang = run_obs("vllm"), _running(run_obs("sglang", footprint={"idle": 40_000, "c=4": 50_100}),
                                             {"c=1": 1, "c=4": 4})
    served = {"vllm": vllm, "sglang": sglang}
    port = _running(run_obs(footprint={"idle": 40_000, "c=4": 50_050}), {"c=1": 1, "c=4": 2})
    verdicts = {v.check: v for v in judge_live(port, CASE, "under-test", _missing, lambda e, c: served.get(e))}
    assert verdicts["live.running_not_below_sglang"].failed
    assert verdicts["live.device_memory_within_sglang_bound"].outcome == "pass"   # inside SGLang's own overrun
    assert verdicts["live.device_memory_within_bound"].failed                     # vLLM stays inside its bound
    oracle = {v.check: v for v in judge_live(sglang, CASE, "oracle", _missing, lambda e, c: served.get(e))}
    assert set(oracle) == {"live.golden", "live.device_memory_within_bound", "live.concurrency_served",
                           "live.oracles_agree"}
    assert oracle["live.oracles_agree"].outcome == "pass"
    none = {v.check: v for v in judge_live(port, CASE, "under-test", _missing)}
    assert none["live.running_not_below_sglang"].failed and "nothing to compare with" in none["live.running_not_below_sglang"].message
