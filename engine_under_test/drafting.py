"""The drafting table of the pinned oracle (vLLM 0.33.0), as the engine's own copy.

Contract: `drafting_budget(method, k)` -> `DraftingBudget(drafting_slots_per_request,
lookahead_tokens)`. Drafting slots are extra query rows a drafting request adds to the target
batch (charged against max_num_batched_tokens per scheduled request); lookahead tokens are KV
slots reserved past the scheduled tokens (every allocation adds them) and the per-request
query rows of a separate draft pass. vLLM 0.33 (`SpeculativeConfig.max_num_new_slots_for_drafting`,
`VllmConfig.num_lookahead_tokens`):

    method       vLLM method   parallel  drafting slots  lookahead
    dflash       dflash        yes       0               k + 1   (separate query pass + bonus)
    dspark       dspark        yes       0               k       (anchor sampling, the default)
    eagle3       eagle3        no        0               k
    p-eagle      eagle3        yes       k - 1           k
    mtp          mtp           no        0               k
    ngram        ngram         no        0               0
    draft_model  draft_model   no        1               k
    pard         draft_model   yes       k               k

A test compares this table with the installed vLLM's, through its observations of the
drafting-table-* cases.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

ORACLE = "vllm 0.33.0"


@dataclass(frozen=True)
class DraftingBudget:
    drafting_slots_per_request: int
    lookahead_tokens: int
    separate_draft_pass: bool   # the drafter runs its own query pass (DFlash / DSpark)


_TABLE: dict[str, tuple[Callable[[int], int], Callable[[int], int], bool]] = {
    "dflash": (lambda k: 0, lambda k: k + 1, True),
    "dspark": (lambda k: 0, lambda k: k, True),
    "eagle3": (lambda k: 0, lambda k: k, False),
    "p-eagle": (lambda k: k - 1, lambda k: k, False),
    "mtp": (lambda k: 0, lambda k: k, False),
    "ngram": (lambda k: 0, lambda k: 0, False),
    "draft_model": (lambda k: 1, lambda k: k, False),
    "pard": (lambda k: k, lambda k: k, False),
}

METHODS = tuple(_TABLE)


def drafting_budget(method: str | None, num_speculative_tokens: int) -> DraftingBudget:
    """The table row for `method` at k = `num_speculative_tokens` (no speculation: zeros)."""
    if method is None:
        return DraftingBudget(0, 0, False)
    try:
        slots, lookahead, separate = _TABLE[method]
    except KeyError:
        raise ValueError(f"speculative_config.method: no drafting-table row for {method!r} (known: {', '.join(_TABLE)})") from None
    k = num_speculative_tokens
    return DraftingBudget(slots(k), lookahead(k), separate)
