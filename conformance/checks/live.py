"""The live suite's rows (suites/live/README.md): an engine served on a device, judged on its run
observation against the oracle's live figures (its run observation of the same run, else its live
golden). The checks themselves are `conformance.checks.live_checks`; `concurrency_served` is here.

Contract: each row's `run` takes a `CheckInput` (`checks.row`) like every other check; `ROWS` are the
rows of `check_table.LIVE_CHECKS`, the live golden first (evaluated by `check_table.judge_live`).
"""

from __future__ import annotations

from typing import Any

from conformance.checks import live_checks as lc
from conformance.checks.common import by, verdict
from conformance.checks.row import BOTH, ORACLE, UNDER_TEST, CheckInput, CheckSpec
from conformance.checks.verdicts import FAIL, PASS, SKIP, Verdict

MIN_CONCURRENCY_SAMPLES = 5   # samples of the running-requests gauge a rung needs before its maximum means anything
SAME_RUN = "measured in this run"   # how `source` begins when the oracle's figures are of this run


def _live(obs: dict[str, Any]) -> dict[str, Any]:
    return (obs.get("throughput") or {}).get("live") or {}


def live_concurrency_served(given: CheckInput) -> Verdict:
    """Bug 2 as an operator meets it: at the top rung the engine runs min(max_num_seqs, concurrency)
    requests at once (its running-requests gauge, sampled through the rung), never more than
    max_num_seqs. Reads `throughput.live.by_phase[top_rung].max_running_requests`. An open-loop ladder
    holds no fixed number of requests in flight, so it is skipped."""
    obs, case_spec = given.obs, given.case_spec
    check = "live.concurrency_served"
    live = _live(obs)
    top = live.get("top_rung")
    if live.get("mode") == "open":
        return verdict(check, obs, SKIP, "open-loop ladder: no rung holds a fixed concurrency to compare with max_num_seqs")
    phase = ((live.get("by_phase") or {}).get(top) or {}) if top else {}
    got = phase.get("max_running_requests")
    if top is None or got is None:
        return verdict(check, obs, SKIP, "running requests not measured: " + "; ".join(live.get("notes") or ["no live figures"]))
    if (phase.get("num_samples") or 0) < MIN_CONCURRENCY_SAMPLES:
        return verdict(check, obs, SKIP, f"{phase.get('num_samples')} sample(s) of the running-requests gauge at {top}: a rung "
                       f"this short cannot show the concurrency (at least {MIN_CONCURRENCY_SAMPLES} needed; serve longer outputs)")
    seqs = case_spec["scheduler"]["max_num_seqs"]
    want = min(seqs, int(top.split("=", 1)[1]))
    if got > seqs:
        return verdict(check, obs, FAIL, f"{got} requests ran at once at {top}, more than max_num_seqs {seqs}")
    if got < want:
        return verdict(check, obs, FAIL, f"at most {got} requests ran at once at {top} where max_num_seqs {seqs} and the "
                       f"load ask for {want}{by(got, want, 'seqs')}: the engine seats fewer than vLLM would run")
    return verdict(check, obs, PASS, f"{got} requests ran at once at {top} (max_num_seqs {seqs})")


def live_golden(given: CheckInput) -> Verdict:
    return lc.live_golden(given.obs, given.other, given.case_spec, given.is_oracle, given.source)


def acceptance_equals_vllm(given: CheckInput) -> Verdict:
    return lc.acceptance_equals_oracle(given.obs, given.other, given.case_spec, given.source)


def throughput_parity_vllm(given: CheckInput) -> Verdict:
    return lc.throughput_parity(given.obs, given.other, given.case_spec, given.source,
                                given.source.startswith(SAME_RUN))


def plan_matches_run(given: CheckInput) -> Verdict:
    return lc.plan_matches_run(given.obs, given.case_spec)


def device_memory_within_bound(given: CheckInput) -> Verdict:
    return lc.device_memory(given.obs, given.other, given.case_spec, given.source, given.is_oracle)


def running_not_below_sglang(given: CheckInput) -> Verdict:
    return lc.running_not_below_oracle(given.obs, given.other, given.source)


def device_memory_within_sglang_bound(given: CheckInput) -> Verdict:
    return lc.device_memory(given.obs, given.other, given.case_spec, given.source, False, check=lc.MEMORY_SGLANG)


def oracles_agree(given: CheckInput) -> Verdict:
    return lc.oracles_agree(given.obs, given.other, given.case_spec, given.source, given.source.startswith(SAME_RUN))


ROWS: tuple[CheckSpec, ...] = (
    CheckSpec(lc.GOLDEN, "live", BOTH, live_golden,
              "served live: a figure's interval lies wholly outside the case's regression band of the engine's own "
              "live golden, or acceptance moved (an oracle without one fails)",
              golden=True, reads=("throughput.rungs", "throughput.live")),
    CheckSpec(lc.ACCEPTANCE, "live", (UNDER_TEST,), acceptance_equals_vllm,
              "the mean acceptance length or the rate at a draft position differs from vLLM's under the same "
              "synthetic acceptance", against="vllm", reads=("throughput.rungs",)),
    CheckSpec(lc.THROUGHPUT, "live", (UNDER_TEST,), throughput_parity_vllm,
              "a rung's tok/s, TTFT, TPOT or ITL ratio to vLLM has its whole interval outside the parity band "
              "(straddling it: `inconclusive`, never a fail)", against="vllm", reads=("throughput.rungs",)),
    CheckSpec(lc.PLAN, "live", (UNDER_TEST,), plan_matches_run,
              "what the engine prints when it starts differs from its own plan of the case",
              reads=("throughput.plan", "throughput.plan_expected")),
    CheckSpec(lc.MEMORY, "live", BOTH, device_memory_within_bound,
              "the process tree's NVML footprint passes gpu_memory_utilization x the CUDA runtime's total by more "
              "than vLLM's own overrun at the same phase (an oracle over its own bound: a `finding`)",
              against="vllm", needs_against=False, reads=("throughput.live",)),
    CheckSpec("live.concurrency_served", "live", BOTH, live_concurrency_served,
              "the running-requests gauge at the top rung is below min(max_num_seqs, c) or above max_num_seqs",
              reads=("throughput.live",)),
    CheckSpec(lc.RUNNING_SGLANG, "live", (UNDER_TEST,), running_not_below_sglang,
              "at a rung the engine ran fewer requests at once than SGLang admitted there (its gauge)",
              against="sglang", reads=("throughput.live",)),
    CheckSpec(lc.MEMORY_SGLANG, "live", (UNDER_TEST,), device_memory_within_sglang_bound,
              "the footprint passes mem_fraction_static x the CUDA runtime's total by more than SGLang's own "
              "overrun at the same phase", against="sglang", reads=("throughput.live",)),
    CheckSpec(lc.ORACLES_AGREE, "live", (ORACLE,), oracles_agree,
              "never fails: SGLang beside vLLM, a figure's interval wholly outside the parity band taken both ways, "
              "or another acceptance, is a `finding` about the oracles", against="vllm", needs_against=False,
              reads=("throughput.rungs",)),
)
