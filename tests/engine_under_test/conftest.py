"""Shared fixtures for the reference engine's runtime tests: seeded tiny checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.paths import MODELS_DIR


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory) -> tuple[Path, Path]:
    """(target_dir, draft_dir): tiny-hybrid and tiny-dflash with seeded float32 weights."""
    from engine_under_test.model.weights import write_random_checkpoint

    root = tmp_path_factory.mktemp("tiny-ckpt")
    target = write_random_checkpoint(MODELS_DIR / "tiny-hybrid", root / "target", seed=0)
    draft = write_random_checkpoint(MODELS_DIR / "tiny-dflash", root / "draft", seed=1)
    return target, draft
