"""The scheduler's edges that the traces do not reach (engine_under_test.scheduler.scheduler).

- `mamba_checkpoint_position(n, bs)`: the last block boundary strictly before the last token;
- `add_request` refuses a duplicate id and a prompt that leaves no room to sample
  (num_prompt_tokens >= max_model_len), and queues the rest as waiting;
- `has_unfinished_requests` / `has_finished_requests` / `has_requests`: a finished request keeps
  `has_requests` true until the next `schedule()` reports it in finished_req_ids;
- EOS finishes a request as FINISHED_STOPPED, max_tokens as FINISHED_LENGTH, and frees its blocks.
"""

from __future__ import annotations

import pytest

from conformance.paths import MODELS_DIR
from engine_under_test.config import EngineConfig, SpeculativeConfig
from engine_under_test.engine_plan import build_plan, make_scheduler
from engine_under_test.scheduler import Request
from engine_under_test.scheduler.request import RequestStatus
from engine_under_test.scheduler.scheduler import mamba_checkpoint_position


def _sched(**kw):
    base = dict(model=MODELS_DIR / "tiny-hybrid", max_num_seqs=4, max_model_len=256, max_num_batched_tokens=256,
                speculative_config=SpeculativeConfig("dflash", 4, MODELS_DIR / "tiny-dflash"),
                kv_cache_memory_bytes=64 * 2**20)
    base.update(kw)
    return make_scheduler(build_plan(EngineConfig(**base)))


@pytest.mark.parametrize("n, expected", [(1, 0), (16, 0), (17, 16), (32, 16), (33, 32), (0, 0)])
def test_mamba_checkpoint_position(n, expected):
    assert mamba_checkpoint_position(n, 16) == expected


def test_add_request_refusals():
    s = _sched()
    s.add_request(Request("a", [3] * 255, max_tokens=1))          # 255 < 256: one token left to sample
    with pytest.raises(ValueError, match="request 'a' already added"):
        s.add_request(Request("a", [3], max_tokens=1))
    with pytest.raises(ValueError, match="request b: prompt of 256 tokens does not fit max_model_len 256"):
        s.add_request(Request("b", [3] * 256, max_tokens=1))
    assert [r.request_id for r in s.waiting] == ["a"] and list(s.requests) == ["a"]


def test_finished_requests_are_reported_once_and_free_their_blocks():
    s = _sched()
    assert not (s.has_unfinished_requests() or s.has_finished_requests() or s.has_requests())
    s.add_request(Request("eos", [5] * 10, max_tokens=8, eos_token_id=7))
    s.add_request(Request("len", [5] * 10, max_tokens=1))
    assert s.has_unfinished_requests() and s.has_requests() and not s.has_finished_requests()
    out = s.schedule()
    assert {r.req_id for r in out.scheduled} == {"eos", "len"} and out.finished_req_ids == ()
    done = s.update_from_output(out, {"eos": [7], "len": [9]})
    assert sorted(done) == ["eos", "len"]
    assert s.requests["eos"].status is RequestStatus.FINISHED_STOPPED
    assert s.requests["len"].status is RequestStatus.FINISHED_LENGTH
    assert not s.has_unfinished_requests() and s.has_finished_requests() and s.has_requests()
    assert s.kv.allocator.num_used_blocks == 0
    s.check_integrity()
    last = s.schedule()
    assert sorted(last.finished_req_ids) == ["eos", "len"] and last.scheduled == ()
    assert not s.has_requests()


def test_drafts_are_kept_only_for_running_requests_past_their_prefill():
    s = _sched(max_num_batched_tokens=64)
    s.add_request(Request("long", [5] * 100, max_tokens=4))        # two chunks of 64 + 36 tokens
    s.add_request(Request("short", [5] * 10, max_tokens=1))
    out = s.schedule()
    assert [r.req_id for r in out.scheduled] == ["long"] and out.scheduled[0].is_prefill_chunk
    s.update_from_output(out, {})
    s.update_draft_token_ids({"unknown": [1], "long": [7] * 4})   # an unknown id is skipped, not the rest
    assert s.requests["long"].spec_token_ids == []                # still prefilling: drafts are dropped
    out = s.schedule()
    s.update_from_output(out, {r.req_id: [9] for r in out.scheduled if not r.is_prefill_chunk})
    s.update_draft_token_ids({"unknown": [1], "short": [7] * 4, "long": [7] * 4})
    assert s.requests["long"].spec_token_ids == [7] * 4
    assert s.requests["short"].status.is_finished and s.requests["short"].spec_token_ids == []
