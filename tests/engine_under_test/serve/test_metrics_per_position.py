"""/metrics' accepted tokens per draft position, as vLLM 0.33 exports them: one labelled counter
sample `vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}` per i in 0 .. k - 1,
summing to `vllm:spec_decode_num_accepted_tokens_total`, read through the load generator's
Prometheus parser. The text is what the server renders for an engine that ran: synthetic
acceptance length 4.0 at k = 8 is vLLM's minimum-variance schedule (1, 1, 1, 0, ...), so every
verify accepts exactly positions 0, 1 and 2. Tiny shapes, seeded random weights, CPU.
"""

from __future__ import annotations

import random
import re

from conformance import paths
from conformance.loadgen.prometheus import parse_samples
from engine_under_test.llm import LLM, SamplingParams
from engine_under_test.serve import metrics
from engine_under_test.serve.build import engine_stats

K = 8
PER_POS = re.compile(r'^vllm:spec_decode_num_accepted_tokens_per_pos_total\{position="(\d+)"\} (\S+)$', re.M)


def test_per_position_samples_follow_the_synthetic_schedule_and_sum_to_accepted() -> None:
    spec = {"method": "dflash", "num_speculative_tokens": K, "model": str(paths.MODELS_DIR / "tiny-dflash"),
            "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 4.0}
    llm = LLM(paths.MODELS_DIR / "tiny-hybrid", spec, max_num_seqs=4, max_model_len=512,
              max_num_batched_tokens=256, kv_cache_memory_bytes=64 * 2**20, load_format="dummy")
    rng = random.Random(0)
    llm.generate([[rng.randrange(2, 1000) for _ in range(n)] for n in (7, 19)],
                 [SamplingParams(max_tokens=n, temperature=0, ignore_eos=True) for n in (33, 21)])
    text = metrics.render(engine_stats(llm.engine))
    samples = parse_samples(text)
    per_pos = {int(i): float(v) for i, v in PER_POS.findall(text)}
    assert sorted(per_pos) == list(range(K))
    assert samples["vllm:spec_decode_num_accepted_tokens_per_pos_total"] == \
        samples["vllm:spec_decode_num_accepted_tokens_total"] > 0
    verifies = samples["vllm:spec_decode_num_draft_tokens_total"] / K
    assert [per_pos[i] for i in range(K)] == [verifies] * 3 + [0.0] * (K - 3)
    assert "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter" in text


def test_no_drafter_renders_no_per_position_samples() -> None:
    llm = LLM(paths.MODELS_DIR / "tiny-hybrid", None, max_num_seqs=2, max_model_len=128,
              max_num_batched_tokens=64, kv_cache_memory_bytes=16 * 2**20, load_format="dummy")
    llm.generate([[3, 4, 5]], SamplingParams(max_tokens=4, temperature=0, ignore_eos=True))
    assert "accepted_tokens_per_pos" not in metrics.render(engine_stats(llm.engine))
