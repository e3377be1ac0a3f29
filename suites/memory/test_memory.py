"""Memory suite: see README.md for the pass criteria (judged by conformance.verdicts)."""

from __future__ import annotations

import pytest

from conformance import verdicts
from conformance.cases import find_case
from conformance.expect import expect, golden_of
from conformance.goldens import check_golden, golden_view


def test_memory_golden(engine, case, observation, golden):
    check_golden(golden, golden_view(observation, ["memory"]))


@pytest.mark.engines("reference")
def test_everything_inside_the_bound(engine, case, observation):
    expect(verdicts.inside_the_bound(observation, case.spec))


@pytest.mark.engines("reference")
def test_seats_not_below_vllm(engine, case, observation):
    expect(verdicts.seats_not_below_vllm(observation, golden_of("memory", "vllm", case.id), "vLLM golden"))


@pytest.mark.engines("reference")
@pytest.mark.cases("seed-unified-pool-c32-k8")
def test_unified_pool_seats_32(engine, case, observation):
    expect(verdicts.unified_pool_seats(observation, golden_of("memory", "vllm", case.id), 32, "vLLM golden"))


@pytest.mark.cases("seed-draft-kv-c8")
def test_draft_kv_scales_with_seqs(engine, case, observation, observations_of):
    expect(verdicts.draft_kv_scaling(observation, observations_of(engine, find_case("seed-draft-kv-c32"))))


@pytest.mark.engines("reference")
def test_short_seats_are_explained(engine, case, observation):
    expect(verdicts.explains_short_seats(observation))
