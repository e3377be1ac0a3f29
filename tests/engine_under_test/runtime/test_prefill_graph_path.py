"""The captured prefill pass (runtime/prefill_graphs.py) computes what the eager runner computes.

On a CPU the prefill body runs eagerly (`enforce_eager=False` builds its buffers; nothing is
captured), so every piece of it but the capture itself is checked here: one request's chunk
padded to a bucket, pad rows that repeat the last input and write only the null block, the
Gated-DeltaNet state after the last input (gate and step size 0 on pad rows, the conv state read
at the last input), attention through the device table with masked SDPA, the last input's
argmax, the drafter's context and its query block opened by that argmax.

- Step for step: two engines run one script (a prompt alone, a prompt longer than the step
  budget in two chunks, a prompt arriving beside decoding requests), one with its prefill
  graphs turned off. Every step's sampled tokens, drafts and draft / accepted counts are equal,
  and the prefill graphs ran each kind of pass (a fresh prompt, a chunk that does not end its
  prompt, the chunk after it, a mixed step's prompt chunk beside captured decode rows).
- The pool after one pass: every block but the null block 0 holds what the eager pass wrote
  (K/V, recurrent and conv states, the drafter's context).
- Lossless: greedy speculative output through the prefill graphs equals the eager
  non-speculative output, with the real drafter and with scripted drafts (every accepted-prefix
  length), prompts one at a time (each on the prefill graphs) and together.
"""

from __future__ import annotations

import random

import pytest
import torch

from engine_under_test.llm import LLM, SamplingParams
from engine_under_test.runtime.prefill_graphs import PrefillGraphs, prefill_buckets

MAX_MODEL_LEN = 256
BUDGET_TOKENS = 96                          # buckets (64, 96): a 150-token prompt runs as 96 + 54


def _llm(target, draft=None, k=0, enforce_eager=False):
    spec = {"method": "dflash", "model": str(draft), "num_speculative_tokens": k} if draft else None
    return LLM(target, spec, max_num_seqs=4, max_model_len=MAX_MODEL_LEN, max_num_batched_tokens=BUDGET_TOKENS,
               kv_cache_memory_bytes=12 * 2**20, enforce_eager=enforce_eager)


def _prompt(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(2, 1000) for _ in range(n)]


def _greedy(n: int) -> SamplingParams:
    return SamplingParams(max_tokens=n, temperature=0, ignore_eos=True)


class _Recorder:
    """Every step's result (sampled, drafts, counts) and, with prefill graphs, which passes ran on
    them: one request's as (is a chunk that does not end its prompt, tokens computed before it,
    decode rows beside it); several requests' in `multi` as (requests, their chunks' lengths, how
    many do not end their prompt, decode rows beside them)."""

    def __init__(self, llm):
        runner = llm.engine.runner
        self.steps: list[tuple] = []
        self.passes: list[tuple[bool, int, int]] = []
        self.multi: list[tuple[int, tuple[int, ...], int, int]] = []
        execute = runner.execute

        def recorded(out, *a, **kw):
            result = execute(out, *a, **kw)
            self.steps.append((sorted(result.sampled.items()), sorted(result.drafts.items()), result.num_draft_tokens,
                               result.num_accepted_tokens, list(result.num_accepted_tokens_per_pos)))
            return result
        runner.execute = recorded
        prefill = runner.prefill_graphs
        launch = prefill.launch

        def launched(reqs):
            decode_rows = sum(1 for r in self._out.scheduled if r.num_scheduled_tokens > 0) - len(reqs)
            if len(reqs) == 1:
                self.passes.append((reqs[0].is_prefill_chunk, reqs[0].num_computed_tokens, decode_rows))
            else:
                self.multi.append((len(reqs), tuple(sr.num_scheduled_tokens for sr in reqs),
                                   sum(sr.is_prefill_chunk for sr in reqs), decode_rows))
            return launch(reqs)
        prefill.launch = launched
        schedule = llm.engine.scheduler.schedule

        def scheduled(*a, **kw):
            self._out = schedule(*a, **kw)
            return self._out
        llm.engine.scheduler.schedule = scheduled


def _script(llm) -> list[list[int]]:
    """A prompt alone, a prompt in two chunks, then two prompts arriving while the first decodes;
    returns the requests' output tokens."""
    eng = llm.engine
    outputs: dict[str, list[int]] = {}

    def drain(steps: int | None = None):
        done = 0
        while eng.has_unfinished_requests() and (steps is None or done < steps):
            for o in eng.step():
                outputs[o.request_id] = list(o.output_token_ids)
            done += 1

    eng.add_request("alone", _prompt(70, 1), _greedy(12))
    drain()
    eng.add_request("chunked", _prompt(150, 2), _greedy(10))
    drain()
    eng.add_request("first", _prompt(23, 3), _greedy(30))
    drain(3)
    eng.add_request("beside", _prompt(41, 4), _greedy(9))
    drain(2)
    eng.add_request("beside-long", _prompt(120, 5), _greedy(6))
    drain()
    return [outputs[r] for r in ("alone", "chunked", "first", "beside", "beside-long")]


def test_prefill_buckets_stop_at_the_step_budget():
    assert prefill_buckets(8192) == (64, 128, 256, 512)
    assert prefill_buckets(300) == (64, 128, 256, 300)
    assert prefill_buckets(96) == (64, 96)
    assert prefill_buckets(48) == (48,)
    with pytest.raises(ValueError, match="buckets"):
        PrefillGraphs(None, (), MAX_MODEL_LEN)


@pytest.mark.parametrize("k", [4, 8])
def test_prefill_graph_steps_equal_eager_steps(tiny_checkpoints, k):
    target, draft = tiny_checkpoints
    on, off = _llm(target, draft, k), _llm(target, draft, k)
    off.engine.runner.prefill_graphs.enabled = False
    rec_on, rec_off = _Recorder(on), _Recorder(off)
    assert _script(on) == _script(off)
    assert len(rec_on.steps) == len(rec_off.steps)
    for i, (a, b) in enumerate(zip(rec_on.steps, rec_off.steps)):
        assert a == b, f"step {i}"
    assert not rec_off.passes
    kinds = set(rec_on.passes)
    assert (False, 0, 0) in kinds                           # a fresh prompt alone
    assert (True, 0, 0) in kinds                            # a chunk that does not end its prompt
    assert (False, BUDGET_TOKENS, 0) in kinds               # the chunk after it
    assert any(rows > 0 for _, _, rows in kinds)            # a prompt chunk beside captured decode rows


def _caches(llm) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    runner = llm.engine.runner
    return {name: (c.first, c.second) for name, c in {**runner.kv, **runner.state}.items()}


@pytest.mark.parametrize("prompt_tokens", [70, 150])
def test_the_pool_after_a_prefill_pass_is_the_eager_pools(tiny_checkpoints, prompt_tokens):
    target, draft = tiny_checkpoints
    on, off = _llm(target, draft, 4), _llm(target, draft, 4)
    off.engine.runner.prefill_graphs.enabled = False
    for llm in (on, off):
        llm.engine.add_request("r", _prompt(prompt_tokens, 7), _greedy(4))
    for step in range(2 if prompt_tokens > BUDGET_TOKENS else 1):    # the chunks of the prompt
        before = on.engine.runner.prefill_graphs.num_passes
        on.engine.step()
        off.engine.step()
        assert on.engine.runner.prefill_graphs.num_passes == before + 1
        caches_on, caches_off = _caches(on), _caches(off)
        for name in caches_on:
            for a, b in zip(caches_on[name], caches_off[name]):
                # block 0 is the null block the pad rows write; every other block as the eager pass left it
                assert torch.allclose(a[1:].float(), b[1:].float(), rtol=1e-4, atol=1e-5), (step, name)
                written = (b[1:] != 0).flatten(1).any(1)
                assert written.any(), (step, name)


@pytest.fixture(scope="module")
def reference(tiny_checkpoints):
    llm = _llm(tiny_checkpoints[0], enforce_eager=True)
    return _outputs(llm, together=True)


PROMPTS = ((70, 1), (150, 2), (23, 3), (5, 4))
OUTPUTS = (12, 10, 30, 9)


def _outputs(llm, together: bool) -> list[list[int]]:
    prompts = [_prompt(n, seed) for n, seed in PROMPTS]
    params = [_greedy(n) for n in OUTPUTS]
    if together:
        return [o.output_token_ids for o in llm.generate(prompts, params)]
    return [llm.generate([p], [s])[0].output_token_ids for p, s in zip(prompts, params)]


@pytest.mark.parametrize("k", [4, 8])
@pytest.mark.parametrize("together", [False, True])
def test_prefill_graphs_are_lossless_with_the_real_drafter(tiny_checkpoints, reference, k, together):
    target, draft = tiny_checkpoints
    llm = _llm(target, draft, k)
    assert _outputs(llm, together) == reference
    assert llm.engine.runner.prefill_graphs.num_passes >= (5 if not together else 1)


@pytest.mark.parametrize("k", [4, 8])
def test_prefill_graphs_are_lossless_with_scripted_drafts(tiny_checkpoints, reference, scripted_runner, k):
    target, draft = tiny_checkpoints
    llm = _llm(target, draft, k)
    prompts = [_prompt(n, seed) for n, seed in PROMPTS]
    full = {str(i): p + r for i, (p, r) in enumerate(zip(prompts, reference))}
    runner = scripted_runner(llm.engine.runner, full, seed=k)
    llm.engine.runner = runner
    outs = []
    for i, (p, n) in enumerate(zip(prompts, OUTPUTS)):
        llm.engine.add_request(str(i), p, _greedy(n))
        while llm.engine.has_unfinished_requests():
            for o in llm.engine.step():
                if o.finished:
                    outs.append(list(o.output_token_ids))
    assert outs == reference
    assert runner.prefill_graphs.num_passes == 5          # four prompts, one of them in two chunks
    assert llm.engine.stats().num_accepted_tokens > 0     # the scripted drafts were taken


def test_a_sampling_request_samples_its_first_token_on_the_host(tiny_checkpoints):
    # its first chunk (nothing sampled) may run on the graphs; the chunk that samples runs eagerly,
    # where the seeded sampler draws from the logits, so both engines draw the same tokens
    target, draft = tiny_checkpoints
    outs = []
    for enabled in (True, False):
        llm = _llm(target, draft, 4)
        llm.engine.runner.prefill_graphs.enabled = enabled
        params = SamplingParams(max_tokens=8, temperature=0.8, seed=3, ignore_eos=True)
        outs.append(llm.generate([_prompt(150, 8)], [params])[0].output_token_ids)
        assert llm.engine.runner.prefill_graphs.num_passes == (1 if enabled else 0)
    assert outs[0] == outs[1]


def test_a_failed_prefill_capture_leaves_prompt_chunks_to_the_eager_pass(tiny_checkpoints, reference, monkeypatch):
    # a capture that raises (a CUDA error while recording) does not stop the engine: it says why and
    # runs every prompt chunk eagerly, with the same tokens
    def fail(self, pool=None):
        raise RuntimeError("operation not permitted when stream is capturing\nsecond line")
    monkeypatch.setattr(PrefillGraphs, "capture", fail)
    target, draft = tiny_checkpoints
    llm = _llm(target, draft, 4)
    assert llm.engine.runner.prefill_graphs is None
    assert llm.engine.prefill_graphs_failure == "RuntimeError: operation not permitted when stream is capturing"
    assert _outputs(llm, together=False) == reference
    assert llm.engine.runner.graphs is not None          # the decode graphs still run the decode steps
