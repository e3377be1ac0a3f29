"""On CUDA: the captured prefill pass (runtime/prefill_graphs.py) is captured, replayed, and
computes what the eager pass computes.

- Tiny shapes, float32 with TF32 off (exact greedy tokens, as test_gpu_lossless.py): every bucket
  holds a graph, and greedy speculative output with prompts one at a time (each prefilled by a
  replay, a 150-token prompt in two chunks) and together (replays one after another: no key holds
  two prompts in a step budget of 96, `PrefillGraphs.passes_for`) equals the eager non-speculative
  output, with the real drafter and with scripted drafts (every accepted-prefix length).
- Several new prompts at once (tiny shapes, float32): the keys (G, S) with G > 1 are captured, four
  prompts run as one replay, and greedy speculative output equals the eager non-speculative output.
- After capture in bf16 with fla, an eager step of two prompt chunks (fla's varlen call) compiles none
  of fla's Triton kernels: capture ran them once (`warm_varlen_chunk`).
- The 2b shapes in bf16 (seeded dummy weights), one 500-token prompt (bucket 512, 12 pad rows
  through fla's chunked kernel), and three prompts of 500, 300 and 120 tokens at once (key (4, 512):
  a pad sequence, fla's plain batch of 4): after the pass every block but the null block holds what
  the eager pass wrote (K/V, recurrent and conv states, the drafter's context), within bf16's
  rounding (relative error per layer, over the blocks the requests hold in the layer's group), and
  every other block but the null block is untouched.
"""

from __future__ import annotations

import random

import pytest
import torch

from conformance.paths import MODELS_DIR
from engine_under_test.llm import LLM, SamplingParams

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
              pytest.mark.usefixtures("ieee_float32")]

PROMPTS = ((70, 1), (150, 2), (23, 3), (5, 4))
OUTPUTS = (12, 10, 30, 9)



def _prompt(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(2, 1000) for _ in range(n)]


def _params():
    return [SamplingParams(max_tokens=n, temperature=0, ignore_eos=True) for n in OUTPUTS]


def _tiny(target, draft=None, k=0):
    spec = {"method": "dflash", "model": str(draft), "num_speculative_tokens": k} if draft else None
    return LLM(target, spec, max_num_seqs=4, max_model_len=256, max_num_batched_tokens=96, device="cuda",
               dtype="float32", kv_cache_memory_bytes=12 * 2**20)


def _outputs(llm, together: bool) -> list[list[int]]:
    prompts = [_prompt(n, seed) for n, seed in PROMPTS]
    if together:
        return [o.output_token_ids for o in llm.generate(prompts, _params())]
    return [llm.generate([p], [s])[0].output_token_ids for p, s in zip(prompts, _params())]


@pytest.fixture(scope="module")
def reference(tiny_checkpoints):
    return _outputs(_tiny(tiny_checkpoints[0]), together=True)


@pytest.mark.parametrize("k", [4, 8])
def test_prefill_graphs_are_captured_and_lossless_on_cuda(tiny_checkpoints, reference, k):
    target, draft = tiny_checkpoints
    llm = _tiny(target, draft, k)
    prefill = llm.engine.runner.prefill_graphs
    assert prefill.buckets == (64, 96) and prefill.keys == ((1, 64), (1, 96))     # 2 x 64 is over the budget
    assert all(isinstance(g, torch.cuda.CUDAGraph) for g in prefill.graphs.values())
    assert _outputs(llm, together=False) == reference
    assert prefill.num_passes == 5                  # four prompts, one of them in two chunks
    assert _outputs(llm, together=True) == reference


@pytest.mark.parametrize("k", [4, 8])
def test_prefill_graphs_accepting_drafts_are_lossless_on_cuda(tiny_checkpoints, reference, scripted_runner, k):
    target, draft = tiny_checkpoints
    llm = _tiny(target, draft, k)
    prompts = [_prompt(n, seed) for n, seed in PROMPTS]
    runner = scripted_runner(llm.engine.runner, {str(i): p + r for i, (p, r) in enumerate(zip(prompts, reference))},
                             seed=k)
    llm.engine.runner = runner
    outs = []
    for i, (p, s) in enumerate(zip(prompts, _params())):
        llm.engine.add_request(str(i), p, s)
        while llm.engine.has_unfinished_requests():
            outs.extend(list(o.output_token_ids) for o in llm.engine.step() if o.finished)
    assert outs == reference
    assert runner.prefill_graphs.num_passes == 5
    stats = llm.engine.stats()
    assert stats.num_draft_tokens // 4 < stats.num_accepted_tokens < stats.num_draft_tokens, stats


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("k", [4, 8])
def test_prompts_together_run_one_captured_pass_and_are_lossless_on_cuda(tiny_checkpoints, reference, k):
    # a step budget of 256: keys (2, 64), (2, 128), (4, 64); four prompts of at most 64 tokens are one
    # replay of (4, 64); the module's prompts (70, 150, 23, 5: one of 150 tokens) stay eager together
    target, draft = tiny_checkpoints
    llm = LLM(target, {"method": "dflash", "model": str(draft), "num_speculative_tokens": k}, max_num_seqs=4,
              max_model_len=256, max_num_batched_tokens=256, device="cuda", dtype="float32",
              kv_cache_memory_bytes=24 * 2**20)
    prefill = llm.engine.runner.prefill_graphs
    assert [key for key in prefill.keys if key[0] > 1] == [(2, 64), (2, 128), (4, 64)]
    assert all(isinstance(g, torch.cuda.CUDAGraph) for g in prefill.graphs.values())
    short = [(23, 3), (5, 4), (40, 5), (60, 6)]
    prompts = [_prompt(n, seed) for n, seed in short]
    params = [SamplingParams(max_tokens=n, temperature=0, ignore_eos=True) for n in (12, 10, 30, 9)]
    eager = LLM(target, None, max_num_seqs=4, max_model_len=256, max_num_batched_tokens=256, device="cuda",
                dtype="float32", kv_cache_memory_bytes=24 * 2**20, enforce_eager=True)
    expected = [o.output_token_ids for o in eager.generate(prompts, params)]
    before = prefill.num_passes
    assert [o.output_token_ids for o in llm.generate(prompts, params)] == expected
    assert prefill.num_passes == before + 1                   # the four prompts: one replay of (4, 64)
    assert _outputs(llm, together=True) == reference


def test_an_eager_step_of_several_prompts_compiles_nothing_after_capture(tiny_checkpoints):
    # bf16 with fla: capture ran fla's varlen kernels (warm_varlen_chunk), which no graph runs, so an eager
    # step of two prompt chunks (a ragged group of 100 and 80 tokens: fla's varlen call) compiles and
    # autotunes none of fla's kernels: their first call is not a stall in the middle of serving
    knobs = pytest.importorskip("triton.knobs", reason="Triton's jit_cache_hook (Triton >= 3.4)")
    llm = LLM(tiny_checkpoints[0], None, max_num_seqs=4, max_model_len=256, max_num_batched_tokens=256,
              device="cuda", dtype="bfloat16", kv_cache_memory_bytes=24 * 2**20)
    prefill = llm.engine.runner.prefill_graphs
    assert llm.engine.runner.target.gdn_backend == "fla" and prefill.warmed_varlen
    prefill.enabled = False                                   # the two prompts go eager, as one varlen call
    compiled: list[str] = []

    def record(**kw):
        if str(kw["fn"].module).startswith("fla"):
            compiled.append(kw["repr"].split("[")[0])
        return False                                          # compile as usual
    saved, knobs.runtime.jit_cache_hook = knobs.runtime.jit_cache_hook, record
    try:
        params = SamplingParams(max_tokens=2, temperature=0, ignore_eos=True)
        llm.generate([_prompt(100, 1), _prompt(80, 2)], [params, params])
    finally:
        knobs.runtime.jit_cache_hook = saved
    assert compiled == []


PASSES_2B = {"one prompt": ((500,), 1024), "three prompts": ((500, 300, 120), 2048)}


@pytest.mark.parametrize("lengths, budget", PASSES_2B.values(), ids=PASSES_2B.keys())
def test_a_2b_prefill_replay_leaves_the_eager_pool(lengths, budget):
    target, draft = MODELS_DIR / "qwen35-2b-shaped", MODELS_DIR / "qwen35-2b-dflash-shaped"
    spec = {"method": "dflash", "model": str(draft), "num_speculative_tokens": 8}
    engines = []
    for enabled in (True, False):
        llm = LLM(target, spec, max_num_seqs=4, max_model_len=1024, max_num_batched_tokens=budget, device="cuda",
                  load_format="dummy", kv_cache_memory_bytes=3 * 2**30)
        llm.engine.runner.prefill_graphs.enabled = enabled
        for i, n in enumerate(lengths):
            llm.engine.add_request(f"r{i}", _prompt(n, 9 + i), SamplingParams(max_tokens=4, temperature=0,
                                                                              ignore_eos=True))
        llm.engine.step()
        engines.append(llm)
    on, off = (e.engine.runner for e in engines)
    assert on.prefill_graphs.num_passes == 1 and off.prefill_graphs.num_passes == 0
    G = 1 if len(lengths) == 1 else 4
    assert on.prefill_graphs.graphs[(G, 512)] is not None
    # a block's bytes are one layer group's at a time (the groups share page slots): each layer is read at the
    # blocks its group gave each request, never at another group's bytes seen through its dtype
    blocks = {}
    for i in range(len(lengths)):
        mine, theirs = (e.engine.scheduler.kv.blocks_of(f"r{i}") for e in engines)
        assert mine == theirs
        for gid, ids in mine.items():
            blocks.setdefault(gid, []).extend(ids)
    for name, cache in {**on.kv, **on.state}.items():
        other = {**off.kv, **off.state}[name]
        ids = torch.tensor([b for b in blocks[cache.group_id] if b != 0], device=cache.first.device)
        assert len(ids), name
        for a, b in ((cache.first[ids], other.first[ids]), (cache.second[ids], other.second[ids])):
            assert (b != 0).any(), name
            assert _rel(a, b) < 2e-2, (name, _rel(a, b))
    # and no block the requests do not hold (the null block aside) was written by either pass
    held = sorted({b for ids in blocks.values() for b in ids} | {0})
    for e in engines:
        raw = e.engine.plan.pool.tensor
        rest = torch.ones(raw.shape[1], dtype=torch.bool, device=raw.device)
        rest[held] = False
        assert not raw[:, rest].any()
