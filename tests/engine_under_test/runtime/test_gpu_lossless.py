"""On CUDA: greedy speculative decoding (DFlash, k = 4 and 8) yields exactly the tokens of
greedy non-speculative decoding, for a batch of requests with different prompt and output lengths.

The engines run in float32 with TF32 off: bf16 on a GPU is not bitwise deterministic across
batch shapes (a verify pass of 1 + k tokens and a decode pass of 1 run different kernels), so
near-tied greedy tokens could flip without any engine bug; float32 leaves rounding far below
the logit gaps, and the comparison stays exact equality. Both gated-delta-rule variants run
(one snapshot kernel, and one fla recurrent call per position), on the tiny shapes with the
real drafter and with scripted drafts (every accepted-prefix length 0..k), and on the 2b
shapes (seeded weights) with scripted drafts. With the real drafter the engine also runs
pipelined (async scheduling: step n + 1 launched behind step n, its inputs derived on the
device), which must give the same tokens and must really chain steps. Small pools and max_num_batched_tokens force
chunked prefill and mixed batches.
"""

from __future__ import annotations

import gc
import random

import pytest
import torch

from conformance.paths import MODELS_DIR
from engine_under_test.llm import LLM, SamplingParams

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
              pytest.mark.usefixtures("ieee_float32")]

PROMPT_LENGTHS = (5, 23, 70, 41, 12)
OUTPUT_LENGTHS = (17, 9, 24, 30, 3)



def _prompts():
    rng = random.Random(7)
    return [[rng.randrange(2, 1000) for _ in range(n)] for n in PROMPT_LENGTHS]


def _params():
    return [SamplingParams(max_tokens=n, temperature=0, ignore_eos=True) for n in OUTPUT_LENGTHS]


def _llm(target, draft=None, k=0, backend="fla", **kw):
    spec = {"method": "dflash", "model": str(draft), "num_speculative_tokens": k} if draft else None
    kw.setdefault("kv_cache_memory_bytes", 12 * 2**20)
    llm = LLM(target, spec, max_num_seqs=4, max_model_len=256, max_num_batched_tokens=96, device="cuda",
              dtype="float32", **kw)
    assert llm.engine.target.gdn_backend == "fla"
    llm.engine.target.gdn_backend = backend
    runner = llm.engine.runner
    if backend != "fla" and runner.graphs is not None:
        # the decode graphs run the backend they were captured with (DecodeGraphs.can_run):
        # captured again for this one, or every step of it would run eagerly and none chain
        runner.capture_decode_graphs(runner.graphs.sizes, llm.engine.cfg.max_model_len)
    return llm


def _tokens(llm) -> list[list[int]]:
    return [o.output_token_ids for o in llm.generate(_prompts(), _params())]


def _scripted(llm, reference, seed, runner_cls):
    full = {str(i): p + r for i, (p, r) in enumerate(zip(_prompts(), reference))}
    llm.engine.runner = runner_cls(llm.engine.runner, full, seed=seed)
    return llm


@pytest.fixture(scope="module")
def reference(tiny_checkpoints):
    target, _ = tiny_checkpoints
    return _tokens(_llm(target))


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "pipelined"])
@pytest.mark.parametrize("backend", ["fla", "fla_per_position"])
@pytest.mark.parametrize("k", [4, 8])
def test_dflash_greedy_is_lossless_on_cuda(tiny_checkpoints, reference, k, backend, async_scheduling):
    target, draft = tiny_checkpoints
    llm = _llm(target, draft, k, backend, async_scheduling=async_scheduling)
    assert _tokens(llm) == reference
    assert [len(t) for t in reference] == list(OUTPUT_LENGTHS)
    assert llm.engine.stats().num_draft_tokens > 0
    chained = llm.engine.runner.graphs.num_chained_steps
    assert chained > 0 if async_scheduling else chained == 0


@pytest.mark.parametrize("backend", ["fla", "fla_per_position"])
@pytest.mark.parametrize("k", [4, 8])
def test_accepting_drafts_is_lossless_on_cuda(tiny_checkpoints, reference, k, backend, scripted_runner):
    target, draft = tiny_checkpoints
    llm = _scripted(_llm(target, draft, k, backend), reference, seed=k, runner_cls=scripted_runner)
    assert _tokens(llm) == reference
    stats = llm.engine.stats()
    assert stats.num_draft_tokens // 4 < stats.num_accepted_tokens < stats.num_draft_tokens, stats


def test_2b_shapes_accepting_drafts_is_lossless_on_cuda(scripted_runner):
    """qwen35-2b-shaped + qwen35-2b-dflash-shaped, seeded float32 weights, k = 4 and 8."""
    target, draft = MODELS_DIR / "qwen35-2b-shaped", MODELS_DIR / "qwen35-2b-dflash-shaped"
    kw = {"load_format": "dummy", "kv_cache_memory_bytes": 3 * 2**30}
    base = _llm(target, **kw)
    ref = _tokens(base)
    del base
    gc.collect()
    for k in (4, 8):
        llm = _scripted(_llm(target, draft, k, **kw), ref, seed=k, runner_cls=scripted_runner)
        assert _tokens(llm) == ref, f"k={k}"
        stats = llm.engine.stats()
        assert stats.num_accepted_tokens > stats.num_draft_tokens // 4, stats
        del llm
        gc.collect()
