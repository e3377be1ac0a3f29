"""Shared fixtures for the reference engine's runtime tests: seeded tiny checkpoints."""

from __future__ import annotations

import gc
import random
from pathlib import Path

import pytest
import torch

from engine_under_test.runtime.runner import ModelRunner

from conformance.paths import MODELS_DIR


@pytest.fixture(scope="module")
def ieee_float32():
    """The GPU tests' float32 is IEEE (TF32 off) for the module, so greedy tokens and kernel
    errors compare exactly or to float32's rounding; they need fla-core (skipped without it).
    Afterwards TF32 is as it was and the module's cached device memory is released."""
    pytest.importorskip("fla", reason="the engine's CUDA kernels need fla-core")
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    gc.collect()
    torch.cuda.empty_cache()


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory) -> tuple[Path, Path]:
    """(target_dir, draft_dir): tiny-hybrid and tiny-dflash with seeded float32 weights."""
    from engine_under_test.model.weights import write_random_checkpoint

    root = tmp_path_factory.mktemp("tiny-ckpt")
    target = write_random_checkpoint(MODELS_DIR / "tiny-hybrid", root / "target", seed=0)
    draft = write_random_checkpoint(MODELS_DIR / "tiny-dflash", root / "draft", seed=1)
    return target, draft


class ScriptedRunner(ModelRunner):
    """Runs the real drafter, then proposes the reference continuation with seeded corruptions."""

    def __init__(self, base: ModelRunner, full_sequences: dict[str, list[int]], seed: int):
        self.__dict__.update(base.__dict__)
        self.full, self.rng = full_sequences, random.Random(seed)

    def _adjust_drafts(self, reqs, accepted, drafts):
        for sr in reqs:
            if sr.req_id not in drafts:
                continue
            p = sr.num_computed_tokens + sr.num_scheduled_tokens - len(sr.spec_token_ids) + accepted[sr.req_id]
            truth = (self.full[sr.req_id] + [5] * self.k)[p + 1:p + 1 + self.k]
            cut = self.rng.randrange(self.k + 1)          # first corrupted draft (k: none)
            drafts[sr.req_id] = [t if j < cut else (t + 1) % 1000 for j, t in enumerate(truth)]
        return drafts


@pytest.fixture
def scripted_runner():
    """Scripted drafts for lossless tests (fixture `scripted_runner`): the real drafter runs, then its
    proposals are replaced by the reference continuation with a seeded corruption point, so every
    accepted-prefix length 0..k, state rollback and KV overwrite get exercised (random weights make
    real drafts all miss)."""
    return ScriptedRunner
