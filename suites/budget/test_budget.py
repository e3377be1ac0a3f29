"""Budget suite: see README.md for the pass criteria (judged by conformance.verdicts)."""

from __future__ import annotations

import pytest

from conformance import verdicts
from conformance.expect import expect, golden_of
from conformance.goldens import check_golden, golden_view


def test_budget_golden(engine, case, observation, golden):
    check_golden(golden, golden_view(observation, ["budget"]))


@pytest.mark.engines("reference")
def test_budget_parity_with_vllm(engine, case, observation):
    expect(verdicts.budget_parity_with_vllm(observation, golden_of("budget", "vllm", case.id), case.spec,
                                            "vLLM golden"))


@pytest.mark.engines("reference")
def test_active_seqs_not_below_sglang(engine, case, observation):
    expect(verdicts.active_seqs_not_below_sglang(observation, golden_of("budget", "sglang", case.id), case.spec,
                                                 "SGLang golden"))
