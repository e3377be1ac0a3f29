"""`Request.token_ids_between` is the slice of the whole sequence (prompt + outputs + drafts) that
the scheduler used to build and cut each step, at every boundary: inside the prompt, across it,
inside the outputs, into the drafts, and past the drafts (async placeholders)."""

from __future__ import annotations

from engine_under_test.scheduler.request import Request


def test_every_slice_is_the_slice_of_the_concatenation():
    req = Request("r", list(range(100, 107)), max_tokens=20)
    req.output_token_ids = list(range(200, 205))
    drafts = [-1, 301, 302]
    whole = req.all_token_ids + drafts
    checked = 0
    for start in range(len(whole) + 3):
        for stop in range(start, len(whole) + 4):
            assert req.token_ids_between(start, stop, drafts) == tuple(whole[start:stop]), (start, stop)
            checked += 1
    assert checked > 100
    assert req.token_ids_between(8, 11) == (201, 202, 203)          # no drafts given
