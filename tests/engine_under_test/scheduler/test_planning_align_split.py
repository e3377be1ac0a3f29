"""The align-mode split (vLLM's `_mamba_block_aligned_split`) on hand-placed requests, and the
scheduler's integrity checks (engine_under_test.scheduler.scheduler).

- a prompt chunk ending before the prompt's end is cut down to a block boundary, unless that
  leaves nothing and a block is larger than the step budget (then it stays unaligned);
- a chunk that starts inside a block stops at the next block boundary, and no chunk passes the
  last cacheable boundary (`mamba_checkpoint_position`);
- decoding past the prompt is still split while it starts before num_tokens - 1;
- `check_integrity` names a request both running and waiting, too many running requests, and a
  waiting request holding blocks.
"""

from __future__ import annotations

import pytest

from conformance.paths import MODELS_DIR
from engine_under_test.config import EngineConfig, SpeculativeConfig
from engine_under_test.engine_plan import build_plan, make_scheduler
from engine_under_test.scheduler import Request


def _sched(mnbt=512, max_num_seqs=4):
    cfg = EngineConfig(model=MODELS_DIR / "tiny-hybrid", max_num_seqs=max_num_seqs, max_model_len=2048,
                       max_num_batched_tokens=mnbt, speculative_config=SpeculativeConfig("dflash", 4, MODELS_DIR / "tiny-dflash"),
                       kv_cache_memory_bytes=64 * 2**20, enable_prefix_caching=True)
    s = make_scheduler(build_plan(cfg))
    assert s.align_mode
    return s, s.layout.block_size_tokens


def _req(prompt, computed=0, outputs=0):
    r = Request("r", [3] * prompt, max_tokens=100)
    r.output_token_ids = [4] * outputs
    r.num_computed_tokens = computed
    return r


def test_a_chunk_inside_the_prompt_ends_on_a_block_boundary():
    s, bs = _sched()
    assert s._align_split(_req(5 * bs + 10), 3 * bs + 7) == 3 * bs
    assert s._align_split(_req(5 * bs + 10), 5 * bs + 10) == 5 * bs      # the last cacheable boundary


def test_a_chunk_shorter_than_a_block_stays_unaligned_only_when_a_block_exceeds_the_budget():
    s, bs = _sched()
    small, _ = _sched(mnbt=bs - 40)
    assert small._align_split(_req(5 * bs), bs - 40) == bs - 40          # block > budget: never 0
    assert s._align_split(_req(5 * bs), bs - 40) == 0                   # block within budget: wait for more
    exact, _ = _sched(mnbt=bs)
    assert exact._align_split(_req(5 * bs), bs - 40) == 0


def test_a_chunk_starting_inside_a_block_stops_at_the_next_boundary():
    s, bs = _sched()
    assert s._align_split(_req(5 * bs + 10, computed=bs + 3), 2 * bs) == bs - 3


def test_decoding_is_split_while_it_starts_before_the_last_token():
    s, bs = _sched()
    r = _req(bs + 10, computed=2 * bs - 1, outputs=bs - 9)                # num_tokens = 2 bs + 1
    assert r.num_tokens == 2 * bs + 1
    assert s._align_split(r, 5) == 1                                    # stops at the checkpoint 2 bs
    done = _req(bs + 10, computed=2 * bs, outputs=bs - 9)
    assert s._align_split(done, 5) == 5


def test_check_integrity_names_what_is_wrong():
    s, _ = _sched(max_num_seqs=1)
    for rid in ("a", "b"):
        s.add_request(Request(rid, [3] * 20, max_tokens=4))
    out = s.schedule()
    s.check_integrity()
    a = s.running[0]
    s.waiting.append(a)
    with pytest.raises(AssertionError) as exc:
        s.check_integrity()
    assert str(exc.value).splitlines()[0] == "a request is both running and waiting"
    s.waiting.pop()
    b = s.waiting.popleft()
    s.running.append(b)
    with pytest.raises(AssertionError) as exc:
        s.check_integrity()
    assert str(exc.value).splitlines()[0] == "more running requests than max_num_seqs"
    s.running.remove(b)
    s.running.remove(a)
    s.waiting.append(a)
    a.status = b.status
    with pytest.raises(AssertionError) as exc:
        s.check_integrity()
    assert str(exc.value).splitlines()[0] == f"waiting request {a.request_id} holds blocks"
    assert out.scheduled
