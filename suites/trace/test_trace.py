"""Trace suite: see README.md for the pass criteria (judged by conformance.verdicts)."""

from __future__ import annotations

import pytest

from conformance import verdicts
from conformance.expect import expect, golden_of
from conformance.goldens import check_golden, golden_view


def test_trace_golden(engine, case, observation, golden):
    check_golden(golden, golden_view(observation, ["trace"]))


@pytest.mark.engines("reference", "vllm")
def test_steps_within_budget(engine, case, observation):
    expect(verdicts.steps_within_budget(observation))


@pytest.mark.engines("reference")
@pytest.mark.cases("tiny-*")
def test_trace_equals_vllm(engine, case, observation):
    expect(verdicts.trace_equals_vllm(observation, golden_of("trace", "vllm", case.id), case.spec, "vLLM golden"))
