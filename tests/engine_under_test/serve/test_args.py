"""`--async-scheduling / --no-async-scheduling` (vLLM's spelling, argparse.BooleanOptionalAction):
default on for `--device cuda` (vLLM's GPU default), off for cpu; either spelling overrides
the default on either device; the value reaches `LLM` through `build.build_engine` (the one
flags -> config mapping) and from there `EngineConfig.async_scheduling`."""

from __future__ import annotations

import pytest

from conformance import paths
from engine_under_test.serve import build
from engine_under_test.serve.args import parse

MODEL = paths.MODELS_DIR / "tiny-hybrid"


@pytest.mark.parametrize("device, flag, expected", [
    ("cpu", None, False), ("cuda", None, True),
    ("cpu", "--async-scheduling", True), ("cuda", "--no-async-scheduling", False),
    ("cuda", "--async-scheduling", True), ("cpu", "--no-async-scheduling", False),
])
def test_async_scheduling_default_follows_the_device(device, flag, expected):
    argv = ["--model", str(MODEL), "--device", device, "--kv-cache-memory-bytes", str(2**20)]
    args = parse(argv + ([flag] if flag else []))
    assert args.async_scheduling is expected


def test_a_misspelt_flag_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        parse(["--model", str(MODEL), "--async-scheduling=yes"])
    assert exc.value.code == 2
    assert "--async-scheduling" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--async-scheduling", "--no-async-scheduling"])
def test_build_engine_passes_the_flag_to_the_engine_config(monkeypatch, flag):
    seen = {}

    class Recording:
        def __init__(self, model, speculative_config, **kw):
            seen.update(kw)
            self.engine = None

    monkeypatch.setattr(build, "LLM", Recording)
    build.build_engine(parse(["--model", str(MODEL), flag]))
    assert seen["async_scheduling"] is (flag == "--async-scheduling")


def test_the_engine_config_gets_the_flag():
    from engine_under_test.llm import LLM

    llm = LLM(MODEL, None, max_num_seqs=2, max_model_len=128, max_num_batched_tokens=64,
              kv_cache_memory_bytes=16 * 2**20, load_format="dummy", async_scheduling=True)
    assert llm.engine.cfg.async_scheduling is True and llm.engine.scheduler.async_scheduling is True
