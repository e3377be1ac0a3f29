"""A captured prefill pass of several new prompts (runtime/prefill_graphs.py, keys (G, S) with G > 1)
computes what the eager runner computes.

On a CPU the prefill body runs eagerly (`enforce_eager=False` builds its buffers; nothing is
captured), so every piece of it but the capture is checked here: G requests' chunks, each padded
to S rows, pad sequences past the step's requests, each sequence's keys read back from the rows it
wrote (causal attention over its own rows), fla's plain batch of G sequences (the torch rule
here), each sequence's last input's argmax, the drafter's context and query blocks.

- Step for step: two engines run one script, one with its prefill graphs off. The script brings
  two prompts at once (ragged, 40 and 60 tokens), four at once over the step budget (the fourth
  a chunk that does not end its prompt, then its rest alone), three at once (a pad sequence), two
  beside decoding requests (a mixed step: the decode rows on the decode graphs), a new prompt
  beside another's later chunk (two passes, one after the other) and a sampling request beside a
  greedy one (eager). Every step's sampled tokens, drafts and counts are equal, and each kind of
  pass ran.
- The pool after one pass of three prompts: every block but the null block 0 holds what the
  eager pass wrote.
- Lossless: greedy speculative output with prompts arriving together equals the eager
  non-speculative output, with the real drafter and with scripted drafts.
"""

from __future__ import annotations

import random

import pytest
import torch

from engine_under_test.llm import LLM, SamplingParams
from engine_under_test.runtime.prefill_graphs import PrefillGraphs, prefill_seq_buckets

BUDGET_TOKENS = 256          # buckets (64, 128, 256); keys with G > 1: (2, 64), (2, 128), (4, 64)


def _llm(target, draft=None, k=0, enforce_eager=False):
    spec = {"method": "dflash", "model": str(draft), "num_speculative_tokens": k} if draft else None
    return LLM(target, spec, max_num_seqs=4, max_model_len=512, max_num_batched_tokens=BUDGET_TOKENS,
               kv_cache_memory_bytes=24 * 2**20, enforce_eager=enforce_eager)


def _prompt(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(2, 1000) for _ in range(n)]


def _greedy(n: int) -> SamplingParams:
    return SamplingParams(max_tokens=n, temperature=0, ignore_eos=True)


class _Recorder:
    """Every step's result, and the prefill graphs' passes as (requests, chunks that do not end
    their prompt, tokens computed before the chunks, decode rows beside them)."""

    def __init__(self, llm):
        runner, eng = llm.engine.runner, llm.engine
        self.steps: list[tuple] = []
        self.passes: list[tuple[int, int, int, int]] = []
        execute, launch, schedule = runner.execute, runner.prefill_graphs.launch, eng.scheduler.schedule

        def recorded(out, *a, **kw):
            result = execute(out, *a, **kw)
            self.steps.append((sorted(result.sampled.items()), sorted(result.drafts.items()), result.num_draft_tokens,
                               result.num_accepted_tokens, list(result.num_accepted_tokens_per_pos)))
            return result

        def launched(reqs):
            decode_rows = sum(1 for r in self._out.scheduled if r.num_scheduled_tokens > 0) - len(reqs)
            self.passes.append((len(reqs), sum(sr.is_prefill_chunk for sr in reqs),
                                sum(sr.num_computed_tokens for sr in reqs), decode_rows))
            return launch(reqs)

        def scheduled(*a, **kw):
            self._out = schedule(*a, **kw)
            return self._out
        runner.execute, runner.prefill_graphs.launch, eng.scheduler.schedule = recorded, launched, scheduled


def _script(llm) -> dict[str, list[int]]:
    eng = llm.engine
    outputs: dict[str, list[int]] = {}

    def add(name, n, seed, params=None):
        eng.add_request(name, _prompt(n, seed), params or _greedy(6))

    def drain(steps: int | None = None):
        done = 0
        while eng.has_unfinished_requests() and (steps is None or done < steps):
            for o in eng.step():
                outputs[o.request_id] = list(o.output_token_ids)
            done += 1

    add("a", 40, 1), add("b", 60, 2)                                   # two at once, ragged
    drain()
    add("c", 64, 3), add("d", 64, 4), add("e", 64, 5), add("f", 100, 6)   # over the budget: f in two chunks
    drain()
    add("g", 20, 7), add("h", 30, 8), add("i", 50, 9)                  # three: one pad sequence
    drain()
    add("j", 23, 10, _greedy(30))
    drain(3)
    add("k", 41, 11), add("l", 33, 12)                                 # beside a decoding request
    drain()
    add("m", 300, 13)                                                  # its second chunk beside a new prompt: two passes
    drain(1)
    add("n", 30, 14)
    drain()
    add("o", 30, 15, SamplingParams(max_tokens=5, temperature=1.0, seed=3)), add("p", 30, 16)
    drain()
    return outputs


def test_sequence_buckets_stop_at_max_num_seqs_and_hold_one():
    assert prefill_seq_buckets(32) == (1, 2, 4, 8, 16) and prefill_seq_buckets(4) == (1, 2, 4)
    assert prefill_seq_buckets(1) == (1,)
    with pytest.raises(ValueError, match="sequence buckets"):     # refused before the runner is read
        PrefillGraphs(None, (64,), 256, seq_buckets=(2, 4))


@pytest.mark.parametrize("k", [4, 8])
def test_prompt_steps_equal_eager_steps(tiny_checkpoints, k):
    target, draft = tiny_checkpoints
    on, off = _llm(target, draft, k), _llm(target, draft, k)
    assert [key for key in on.engine.runner.prefill_graphs.keys if key[0] > 1] == [(2, 64), (2, 128), (4, 64)]
    off.engine.runner.prefill_graphs.enabled = False
    rec_on, rec_off = _Recorder(on), _Recorder(off)
    assert _script(on) == _script(off)
    assert len(rec_on.steps) == len(rec_off.steps)
    for i, (a, b) in enumerate(zip(rec_on.steps, rec_off.steps)):
        assert a == b, f"step {i}"
    assert not rec_off.passes
    several = [p for p in rec_on.passes if p[0] > 1]
    assert (2, 0, 0, 0) in several                  # a and b
    assert (4, 1, 0, 0) in several                  # c .. f, f's first chunk not ending its prompt
    assert (3, 0, 0, 0) in several                  # g, h, i and a pad sequence
    assert any(n == 2 and rows > 0 for n, _, _, rows in several)      # k and l beside j's decode rows
    assert all(before == 0 for _, _, before, _ in several)            # new prompts only
    assert (1, 0, 64, 3) in rec_on.passes           # f's rest alone beside the decode rows of c, d, e
    # m's later chunk beside n's new prompt: two passes, one after the other (PrefillGraphs.passes_for)
    assert (1, 0, 256, 1) in rec_on.passes and (1, 0, 0, 1) in rec_on.passes


def _caches(llm) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    runner = llm.engine.runner
    return {name: (c.first, c.second) for name, c in {**runner.kv, **runner.state}.items()}


def test_the_pool_after_a_pass_of_prompts_is_the_eager_pools(tiny_checkpoints):
    target, draft = tiny_checkpoints
    on, off = _llm(target, draft, 4), _llm(target, draft, 4)
    off.engine.runner.prefill_graphs.enabled = False
    for llm in (on, off):
        for i, n in enumerate((20, 50, 64)):
            llm.engine.add_request(str(i), _prompt(n, 20 + i), _greedy(4))
        llm.engine.step()
    assert on.engine.runner.prefill_graphs.num_passes == 1 and off.engine.runner.prefill_graphs.num_passes == 0
    caches_on, caches_off = _caches(on), _caches(off)
    for name in caches_on:
        for a, b in zip(caches_on[name], caches_off[name]):
            # block 0 is the null block the pad rows and the pad sequence write
            assert torch.allclose(a[1:].float(), b[1:].float(), rtol=1e-4, atol=1e-5), name
            assert (b[1:] != 0).flatten(1).any(1).any(), name


PROMPTS = ((40, 1), (60, 2), (23, 3), (5, 4))
OUTPUTS = (12, 10, 30, 9)


@pytest.fixture(scope="module")
def reference(tiny_checkpoints):
    llm = _llm(tiny_checkpoints[0], enforce_eager=True)
    outs = llm.generate([_prompt(n, s) for n, s in PROMPTS], [_greedy(n) for n in OUTPUTS])
    return [o.output_token_ids for o in outs]


@pytest.mark.parametrize("k", [4, 8])
def test_prompts_together_are_lossless_with_the_real_drafter(tiny_checkpoints, reference, k):
    target, draft = tiny_checkpoints
    llm = _llm(target, draft, k)
    rec = _Recorder(llm)
    outs = llm.generate([_prompt(n, s) for n, s in PROMPTS], [_greedy(n) for n in OUTPUTS])
    assert [o.output_token_ids for o in outs] == reference
    assert rec.passes and rec.passes[0][0] == 4                      # the four prompts in one pass


@pytest.mark.parametrize("k", [4, 8])
def test_prompts_together_are_lossless_with_scripted_drafts(tiny_checkpoints, reference, scripted_runner, k):
    target, draft = tiny_checkpoints
    llm = _llm(target, draft, k)
    prompts = [_prompt(n, s) for n, s in PROMPTS]
    runner = scripted_runner(llm.engine.runner, {str(i): p + r for i, (p, r) in enumerate(zip(prompts, reference))},
                             seed=k)
    llm.engine.runner = runner
    for i, (p, n) in enumerate(zip(prompts, OUTPUTS)):
        llm.engine.add_request(str(i), p, _greedy(n))
    outs: dict[str, list[int]] = {}
    while llm.engine.has_unfinished_requests():
        outs.update({o.request_id: list(o.output_token_ids) for o in llm.engine.step() if o.finished})
    assert [outs[str(i)] for i in range(len(PROMPTS))] == reference
    assert runner.prefill_graphs.num_passes >= 1
    stats = llm.engine.stats()
    assert stats.num_draft_tokens // 4 < stats.num_accepted_tokens < stats.num_draft_tokens, stats


@pytest.mark.parametrize("k", [4, 8])
def test_six_prompts_at_once_equal_eager_steps(tiny_checkpoints, k):
    # key (8, 64): two pad sequences, and the drafter's logits taken in two parts (DRAFT_LOGIT_SEQS = 4)
    target, draft = tiny_checkpoints
    spec = {"method": "dflash", "model": str(draft), "num_speculative_tokens": k}
    on, off = (LLM(target, spec, max_num_seqs=8, max_model_len=256, max_num_batched_tokens=512,
                   kv_cache_memory_bytes=64 * 2**20, enforce_eager=False) for _ in range(2))
    off.engine.runner.prefill_graphs.enabled = False
    rec_on, rec_off = _Recorder(on), _Recorder(off)
    for llm in (on, off):
        for i, n in enumerate((64, 10, 33, 64, 47, 21)):
            llm.engine.add_request(str(i), _prompt(n, 40 + i), _greedy(5))
        while llm.engine.has_unfinished_requests():
            llm.engine.step()
    assert rec_on.steps == rec_off.steps
    assert rec_on.passes[0] == (6, 0, 0, 0) and not rec_off.passes
    assert all(len(drafts) == 6 for _, drafts, *_ in rec_on.steps[:1])      # every prompt drafted
