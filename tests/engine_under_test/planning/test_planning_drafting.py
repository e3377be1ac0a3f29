"""The drafting table's edges: no speculation, and a method it has no row for.

Contract (engine_under_test.drafting): `drafting_budget(None, k)` is the all-zero row (no slots,
no lookahead, no separate draft pass) for any k; an unknown method raises `ValueError` naming the
method and every method the table knows. The rows themselves are judged against vLLM 0.33.0 by
test_planning_vs_vllm.py and the drafting-table-* goldens.
"""

from __future__ import annotations

import pytest

from engine_under_test.drafting import METHODS, DraftingBudget, drafting_budget


@pytest.mark.parametrize("k", [0, 1, 8])
def test_no_speculation_is_the_zero_row(k):
    row = drafting_budget(None, k)
    assert row == DraftingBudget(drafting_slots_per_request=0, lookahead_tokens=0, separate_draft_pass=False)
    assert row.separate_draft_pass is False


def test_an_unknown_method_is_refused_by_name_with_the_known_ones():
    with pytest.raises(ValueError) as exc:
        drafting_budget("medusa", 4)
    msg = str(exc.value)
    assert "'medusa'" in msg and "speculative_config.method" in msg
    assert f"(known: {', '.join(METHODS)})" in msg
