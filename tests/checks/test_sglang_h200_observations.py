"""The checks that name SGLang, on what real engines did on one H200 (committed observations and SGLang's
live goldens, suites/results/live/ and goldens/live/): the port holding its draft store beside the pool
fails device memory against SGLang too; the unchanged reference passes against SGLang where it fails
against vLLM (SGLang's own overrun is larger); vLLM and SGLang, served in one run, disagree by more
than the noise, which is a finding about the oracles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.checks import live_checks as lc
from conformance.checks.check_table import judge_live
from conformance.checks.goldens import find_golden
from conformance.documents.cases import find_case
from conformance.documents.golden_doc import GoldenMissingError

RESULTS = Path(__file__).resolve().parents[2] / "suites" / "results" / "live"


def _observations(path: Path) -> dict[str, dict]:
    return {o["engine"]["name"]: o for o in map(json.loads, path.read_text().splitlines()) if o}


def _judge(obs: dict, role: str, served: dict | None = None) -> dict:
    case = find_case(obs["case_id"])
    spec = dict(case.spec, id=case.id)
    return {v.check: v for v in judge_live(obs, spec, role, find_golden, lambda e, c: (served or {}).get(e))}


def test_the_draft_store_port_on_27b_fails_against_sglang_and_the_reference_passes():
    port = _observations(RESULTS / "h200-same-run" / "27b-draft-outside" / "observations.jsonl")["live-port-draft-outside"]
    ref = _observations(RESULTS / "h200-same-run" / "27b-reference" / "observations.jsonl")["reference"]
    bad = _judge(port, "under-test")[lc.MEMORY_SGLANG]
    assert bad.failed and "sglang 0.5.23" in bad.message and "live golden" in bad.message, bad.message
    verdicts = _judge(ref, "under-test")
    assert verdicts[lc.MEMORY_SGLANG].outcome == "pass", verdicts[lc.MEMORY_SGLANG].message
    assert verdicts[lc.MEMORY].failed          # vLLM's overrun on this case is smaller than the reference's
    assert verdicts[lc.RUNNING_SGLANG].outcome == "pass" and "c=32 32" in verdicts[lc.RUNNING_SGLANG].message


def test_vllm_and_sglang_in_one_run_disagree_and_that_is_a_finding():
    served = _observations(RESULTS / "h200-sglang" / "same-run" / "observations.jsonl")
    v = _judge(served["sglang"], "oracle", served)[lc.ORACLES_AGREE]
    assert v.outcome == "finding" and "measured in this run" in v.message, v.message
    assert "c=1: TTFT p50" in v.message
    assert _judge(served["vllm"], "oracle", served)[lc.ORACLES_AGREE].outcome == "skip"


def test_sglang_s_goldens_hold_its_own_ladder_and_overrun():
    for case_id, top in (("live-2b-dflash-k8", 32), ("live-27b-dflash-c32-k8", 32)):
        g = find_golden("live", "sglang", case_id)
        assert g["engine"]["version"] == "0.5.23" and "NVIDIA H200" in g["live"]["hardware"]
        assert g["live"]["max_running_requests"][f"c={top}"] == top
        assert all(r["mean_acceptance_length"] == 4.0 for r in g["live"]["rungs"])
        over, _, _ = lc.overrun(g["live"], find_case(case_id).spec["memory"]["gpu_memory_utilization"])
        assert over > 0                           # over its own bound: a finding about the oracle
    with pytest.raises(GoldenMissingError):   # no oracle serves on a CPU: no SGLang golden of the CPU case
        find_golden("live", "sglang", "live-tiny-dflash-cpu")
