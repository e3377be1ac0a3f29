"""On CUDA: greedy speculative decoding (DFlash, k = 4 and 8) yields exactly the tokens of
greedy non-speculative decoding, for a batch of requests with different prompt and output lengths.

The engines run in float32 with TF32 off: bf16 on a GPU is not bitwise deterministic across
batch shapes (a verify pass of 1 + k tokens and a decode pass of 1 run different kernels), so
near-tied greedy tokens could flip without any engine bug; float32 leaves rounding far below
the logit gaps, and the comparison stays exact equality. Both gated-delta-rule variants run
(one snapshot kernel, and one fla recurrent call per position), on the tiny shapes with the
real drafter and with scripted drafts (every accepted-prefix length 0..k), and on the 2b
shapes (seeded weights) with scripted drafts. Small pools and max_num_batched_tokens force
chunked prefill and mixed batches.
"""

from __future__ import annotations

import gc
import random

import pytest
import torch

from conformance.paths import MODELS_DIR
from engine_under_test.llm import LLM, SamplingParams
from engine_under_test.runtime.runner import ModelRunner

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

PROMPT_LENGTHS = (5, 23, 70, 41, 12)
OUTPUT_LENGTHS = (17, 9, 24, 30, 3)


@pytest.fixture(scope="module", autouse=True)
def ieee_float32():
    pytest.importorskip("fla", reason="the engine's CUDA kernels need fla-core")
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    gc.collect()
    torch.cuda.empty_cache()


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
    return llm


def _tokens(llm) -> list[list[int]]:
    return [o.output_token_ids for o in llm.generate(_prompts(), _params())]


class _ScriptedRunner(ModelRunner):
    """Runs the real drafter, then proposes the reference continuation with seeded corruptions
    (as tests/engine_under_test/test_lossless.py does on the CPU)."""

    def __init__(self, base: ModelRunner, full_sequences: dict[str, list[int]], seed: int):
        self.__dict__.update(base.__dict__)
        self.full, self.rng = full_sequences, random.Random(seed)

    def _draft(self, reqs, batch, aux, sampled, accepted):
        drafts = super()._draft(reqs, batch, aux, sampled, accepted)
        for sr in reqs:
            if sr.req_id not in drafts:
                continue
            p = sr.num_computed_tokens + sr.num_scheduled_tokens - len(sr.spec_token_ids) + accepted[sr.req_id]
            truth = (self.full[sr.req_id] + [5] * self.k)[p + 1:p + 1 + self.k]
            cut = self.rng.randrange(self.k + 1)          # first corrupted draft (k: none)
            drafts[sr.req_id] = [t if j < cut else (t + 1) % 1000 for j, t in enumerate(truth)]
        return drafts


def _scripted(llm, reference, seed):
    full = {str(i): p + r for i, (p, r) in enumerate(zip(_prompts(), reference))}
    llm.engine.runner = _ScriptedRunner(llm.engine.runner, full, seed=seed)
    return llm


@pytest.fixture(scope="module")
def reference(tiny_checkpoints):
    target, _ = tiny_checkpoints
    return _tokens(_llm(target))


@pytest.mark.parametrize("backend", ["fla", "fla_per_position"])
@pytest.mark.parametrize("k", [4, 8])
def test_dflash_greedy_is_lossless_on_cuda(tiny_checkpoints, reference, k, backend):
    target, draft = tiny_checkpoints
    llm = _llm(target, draft, k, backend)
    assert _tokens(llm) == reference
    assert [len(t) for t in reference] == list(OUTPUT_LENGTHS)
    assert llm.engine.stats().num_draft_tokens > 0


@pytest.mark.parametrize("backend", ["fla", "fla_per_position"])
@pytest.mark.parametrize("k", [4, 8])
def test_accepting_drafts_is_lossless_on_cuda(tiny_checkpoints, reference, k, backend):
    target, draft = tiny_checkpoints
    llm = _scripted(_llm(target, draft, k, backend), reference, seed=k)
    assert _tokens(llm) == reference
    stats = llm.engine.stats()
    assert stats.num_draft_tokens // 4 < stats.num_accepted_tokens < stats.num_draft_tokens, stats


def test_2b_shapes_accepting_drafts_is_lossless_on_cuda():
    """qwen35-2b-shaped + qwen35-2b-dflash-shaped, seeded float32 weights, k = 4 and 8."""
    target, draft = MODELS_DIR / "qwen35-2b-shaped", MODELS_DIR / "qwen35-2b-dflash-shaped"
    kw = {"load_format": "dummy", "kv_cache_memory_bytes": 3 * 2**30}
    base = _llm(target, **kw)
    ref = _tokens(base)
    del base
    gc.collect()
    for k in (4, 8):
        llm = _scripted(_llm(target, draft, k, **kw), ref, seed=k)
        assert _tokens(llm) == ref, f"k={k}"
        stats = llm.engine.stats()
        assert stats.num_accepted_tokens > stats.num_draft_tokens // 4, stats
        del llm
        gc.collect()
