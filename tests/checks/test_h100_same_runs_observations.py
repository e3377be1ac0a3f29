"""The live checks and the head-to-head table on what vLLM 0.33.0 and the reference did in fifteen runs on
four H100 machines (committed observations: suites/results/live/h100-same-run/, two runs on one machine;
suites/results/live/h100-four-runs/, four on another; suites/results/live/h100-ports-four-runs/, four on a
third, with the four live ports of examples/live-port/ in the same runs;
suites/results/live/h100-prefill-kernels-five-runs/, five on a fourth, the engine with its prompt-pass conv
kernel, fused prefill gates and l2 norm kernel): each run's verdicts as its README
states them. The reference is compared with vLLM as served in the same run (never with the H200 golden:
another card); its throughput parity passes or is inconclusive (an interval straddles the band); its
footprint stays inside the bound with no allowance; vLLM's overrun is a finding; by the head-to-head reading
every rung is at least as good as vLLM's, except c = 32 of the four-run folder's run 3, where TPOT p50 is
worse; and in the runs with the ports each defective port fails the one check its defect is for."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from conformance.checks import live_checks as lc
from conformance.checks.check_table import judge_live
from conformance.checks.goldens import find_golden
from conformance.checks.live_view import live_view
from conformance.documents.cases import find_case
from conformance.paths import REPO_ROOT

LIVE = REPO_ROOT / "suites" / "results" / "live"
ALL_RUNGS = (1, 2, 4, 8, 16, 32)
# run folder, the reference's throughput parity verdict, the rungs that are not "at least as good" as vLLM's
RUNS = [
    ("h100-same-run/run-1", "pass", ()),
    ("h100-same-run/run-2", "inconclusive", ()),
    ("h100-four-runs/run-1", "pass", ()),
    ("h100-four-runs/run-2", "inconclusive", ()),
    ("h100-four-runs/run-3", "pass", (32,)),
    ("h100-four-runs/run-4", "inconclusive", ()),
    ("h100-ports-four-runs/run-1", "inconclusive", ()),
    ("h100-ports-four-runs/run-2", "inconclusive", ()),
    ("h100-ports-four-runs/run-3", "pass", ()),
    ("h100-ports-four-runs/run-4", "inconclusive", ()),
    ("h100-prefill-kernels-five-runs/run-1", "pass", ()),
    ("h100-prefill-kernels-five-runs/run-2", "inconclusive", ()),
    ("h100-prefill-kernels-five-runs/run-3", "inconclusive", ()),
    ("h100-prefill-kernels-five-runs/run-4", "pass", ()),
    ("h100-prefill-kernels-five-runs/run-5", "inconclusive", ()),
]
PORT_RUNS = [f"h100-ports-four-runs/run-{i}" for i in (1, 2, 3, 4)]
# each live port of examples/live-port/ and the one check it fails (the correct port fails none)
PORT_FAILS = {"live-port": None, "live-port-slow": lc.THROUGHPUT, "live-port-acceptance": lc.ACCEPTANCE,
              "live-port-draft-outside": lc.MEMORY}


def _observations(path: Path) -> dict[str, dict]:
    return {o["engine"]["name"]: o for o in map(json.loads, path.read_text().splitlines()) if o}


def _judge(obs: dict, role: str, served: dict) -> dict:
    case = find_case(obs["case_id"])
    spec = dict(case.spec, id=case.id)
    return {v.check: v for v in judge_live(obs, spec, role, find_golden, lambda e, c: served.get(e))}


def _head_to_head():
    spec = importlib.util.spec_from_file_location("live_tables", REPO_ROOT / "benchmarks" / "live_tables.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.head_to_head


@pytest.mark.parametrize("run, parity, _worse", RUNS)
def test_each_runs_verdicts_are_those_its_readme_states(run, parity, _worse):
    served = _observations(LIVE / run / "observations.jsonl")
    assert "H100" in served["vllm"]["device"]["hardware"] and "H100" in served["reference"]["device"]["hardware"]
    mine = _judge(served["reference"], "under-test", served)
    assert mine[lc.THROUGHPUT].outcome == parity, mine[lc.THROUGHPUT].message
    assert "measured in this run" in mine[lc.THROUGHPUT].message
    if parity == "inconclusive":
        assert "straddle" in mine[lc.THROUGHPUT].message and ": inconclusive" in mine[lc.THROUGHPUT].message
    for check in (lc.ACCEPTANCE, lc.PLAN, lc.MEMORY, "live.concurrency_served"):
        assert mine[check].outcome == "pass", (check, mine[check].message)
    util = find_case("live-2b-dflash-k8").spec["memory"]["gpu_memory_utilization"]
    assert not any(lc.overruns(live_view(served["reference"]), util).values())     # no allowance needed
    assert _judge(served["vllm"], "oracle", served)[lc.MEMORY].outcome == "finding"


@pytest.mark.parametrize("run, _parity, worse", RUNS)
def test_each_rung_against_vllms_in_the_same_run(run, _parity, worse):
    served = _observations(LIVE / run / "observations.jsonl")
    rows = [r for r in _head_to_head()({e: live_view(o) for e, o in served.items()}, "vllm").splitlines()[2:]
            if r.startswith("| reference |")]
    verdicts = {int(r.split(" | ")[1]): r.rsplit(" | ", 1)[1].strip(" |") for r in rows}
    assert verdicts == {c: "no" if c in worse else "yes" for c in ALL_RUNGS}
    if worse:     # the one figure that is worse: c = 32's TPOT p50, wholly above 1
        row = next(r for r in rows if r.split(" | ")[1] == "32")
        assert row.split(" | ")[4].endswith("worse") and row.split(" | ")[2].endswith("tie")


@pytest.mark.parametrize("run", PORT_RUNS)
def test_each_defective_port_fails_its_check_in_the_same_run(run):
    served = _observations(LIVE / run / "observations.jsonl")
    assert set(PORT_FAILS) <= set(served)
    for port, check in PORT_FAILS.items():
        verdicts = _judge(served[port], "under-test", served)
        failed = {c for c, v in verdicts.items() if v.outcome == "fail"}
        assert failed == ({check} if check else set()), (port, {c: verdicts[c].message for c in failed})
