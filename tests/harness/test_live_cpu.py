"""Every live check on a CPU, end to end: real engine processes served through `live.measure` and judged
through `check_table.judge_live`. Exactly paced stub engines (tests/fixtures/live) stand in where timing
must be exact: the paced stub is the comparison document, so a CPU's noise cannot decide a verdict;
the reference engine serves the shipped CPU case. Each defective engine fails its check."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conformance.checks.check_table import judge_live
from conformance.documents.cases import load_case
from conformance.documents.golden_doc import GoldenMissingError
from conformance.engines.registry import resolve_engine
from conformance.harness.live_measure import measure

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "live"
REPO = Path(__file__).resolve().parents[2]


def _no_golden(suite, engine, case_id):
    raise GoldenMissingError(f"no {engine} live golden for {case_id}")


@pytest.fixture(scope="module")
def stub_case():
    return load_case(FIXTURES / "live-stub-cpu.yaml")


@pytest.fixture(scope="module")
def paced(stub_case, tmp_path_factory):
    return measure(resolve_engine(str(FIXTURES / "stub-paced.yaml")), stub_case,
                   log_dir=tmp_path_factory.mktemp("paced"))


def _judge(obs, case, comparison):
    spec = dict(case.spec, id=case.id)
    return {v.check: v for v in judge_live(obs, spec, "under-test", _no_golden,
                                           lambda engine, case_id: comparison if engine == "vllm" else None)}


def _served(name, case, tmp_path):
    obs = measure(resolve_engine(str(FIXTURES / f"{name}.yaml")), case, log_dir=tmp_path)
    assert obs["status"] == "ok", obs["message"]
    return obs


def test_the_same_stub_twice_never_fails(paced, stub_case, tmp_path):
    again = _served("stub-paced", stub_case, tmp_path)
    verdicts = _judge(again, stub_case, paced)
    assert verdicts["live.acceptance_equals_vllm"].outcome == "pass"
    assert verdicts["live.throughput_parity_vllm"].outcome in ("pass", "inconclusive")
    assert verdicts["live.concurrency_served"].outcome == "pass"
    rung = again["throughput"]["rungs"][0]
    assert len(rung["output_tok_per_s_repeats"]) == 5 and rung["accepted_per_pos"][:4] == [1.0, 1.0, 1.0, 0.0]


def test_a_stub_a_quarter_slower_fails_throughput_parity(paced, stub_case, tmp_path):
    """Never a pass; on a loaded host the interval may straddle the band (inconclusive, by design): then
    both are measured again, as a user would, and the verdict must come out a fail."""
    comparison = paced
    for attempt in range(3):
        v = _judge(_served("stub-slow", stub_case, tmp_path / f"slow-{attempt}"), stub_case,
                   comparison)["live.throughput_parity_vllm"]
        assert v.outcome != "pass", v.message
        if v.outcome != "inconclusive":
            break
        comparison = _served("stub-paced", stub_case, tmp_path / f"paced-{attempt}")
    assert v.failed and "outside the parity band" in v.message and "output tok/s" in v.message, v.message


def test_a_stub_with_other_acceptance_fails_acceptance_first(paced, stub_case, tmp_path):
    verdicts = _judge(_served("stub-acceptance", stub_case, tmp_path), stub_case, paced)
    assert verdicts["live.acceptance_equals_vllm"].failed
    assert "3.000 vs 4.000" in verdicts["live.acceptance_equals_vllm"].message
    assert verdicts["live.throughput_parity_vllm"].outcome == "inconclusive"
    assert "acceptance differs" in verdicts["live.throughput_parity_vllm"].message


def test_a_stub_holding_a_store_beside_its_pool_fails_device_memory(stub_case, tmp_path):
    """On a CPU the engine's device is the host: its footprint is the resident memory of its process tree.
    The case's bound is set from this host's memory to 150 MB: the paced stub fits, the one holding 300 MB
    beside its pool does not."""
    total = next(int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()
                 if line.startswith("MemTotal:"))
    doc = yaml.safe_load((FIXTURES / "live-stub-cpu.yaml").read_text())
    doc.update(id="live-stub-cpu-util", memory={"gpu_memory_utilization": 150e6 / total},
               target=str(REPO / "conformance" / "models" / "tiny-hybrid"),
               draft=str(REPO / "conformance" / "models" / "tiny-dflash"))
    (tmp_path / "case.yaml").write_text(yaml.safe_dump(doc))
    case = load_case(tmp_path / "case.yaml")
    sound = _judge(_served("stub-paced", case, tmp_path / "a"), case, None)["live.device_memory_within_bound"]
    assert sound.outcome == "pass", sound.message
    bad = _judge(_served("stub-draft-outside", case, tmp_path / "b"), case, None)["live.device_memory_within_bound"]
    assert bad.failed and "over" in bad.message, bad.message


def test_the_reference_on_a_cpu_prints_what_it_planned(tmp_path):
    case = load_case(REPO / "suites" / "live" / "cases" / "live-tiny-dflash-cpu.yaml")
    obs = measure(resolve_engine("reference"), case, log_dir=tmp_path)
    assert obs["status"] == "ok", obs["message"]
    verdicts = _judge(obs, case, None)
    plan = verdicts["live.plan_matches_run"]
    assert plan.outcome == "pass" and "kv_cache_tokens=" in plan.message, plan.message
    assert verdicts["live.concurrency_served"].outcome == "pass"
    assert verdicts["live.throughput_parity_vllm"].outcome == "skip"      # no oracle serves on a CPU
    lying = dict(obs, throughput=dict(obs["throughput"], plan=dict(obs["throughput"]["plan"], kv_cache_tokens=1)))
    assert _judge(lying, case, None)["live.plan_matches_run"].failed


def test_the_live_port_whose_startup_line_disagrees_fails_plan_matches_run(tmp_path):
    """examples/live-port's `startup-line-disagrees`: it plans and runs as planned but prints doubled seats;
    under a KV-bytes bound its startup figures are compared with its own plan of the case."""
    case = load_case(REPO / "suites" / "live" / "cases" / "live-tiny-dflash-cpu.yaml")
    obs = measure(resolve_engine(str(REPO / "examples" / "live-port" / "engine-startup-line.yaml")), case,
                  log_dir=tmp_path)
    assert obs["status"] == "ok", obs["message"]
    v = _judge(obs, case, None)["live.plan_matches_run"]
    assert v.failed and "kv_cache_tokens: printed" in v.message, v.message


def _sglang_golden(case_id: str = "live-2b-dflash-k8") -> dict:
    from conformance.checks.goldens import find_golden

    return find_golden("live", "sglang", case_id)


def test_a_stub_short_of_seats_runs_fewer_requests_than_sglang_admits(paced, stub_case, tmp_path):
    """Judged against SGLang's live golden of the 2b case (one H200: it ran 1 request at once at c = 1 and
    4 at c = 4, as many as asked): the paced stub runs as many; the stub with one seat (the rest wait)
    runs 1 at c = 4 and fails `live.running_not_below_sglang`."""
    golden = _sglang_golden()
    spec = dict(stub_case.spec, id=stub_case.id)

    def judge(obs):
        def lookup(suite, engine, case_id):
            if engine == "sglang":
                return golden
            raise GoldenMissingError(f"no {engine} live golden")
        return {v.check: v for v in judge_live(obs, spec, "under-test", lookup)}

    sound = judge(paced)["live.running_not_below_sglang"]
    assert sound.outcome == "pass" and "sglang 0.5.23 live golden" in sound.message, sound.message
    few = _served("stub-few-seats", stub_case, tmp_path)
    v = judge(few)["live.running_not_below_sglang"]
    assert v.failed and "at most 1 requests ran at once at c=4" in v.message and "admitted 4" in v.message, v.message
