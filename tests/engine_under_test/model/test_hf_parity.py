"""The target matches transformers' Qwen3_5ForCausalLM (float32, CPU) on the same seeded weights.

Both load one safetensors directory written by the seeded writer. Prefill: two prompts of
different lengths in ONE batch through the pool (one crosses the 64-token delta-rule chunk and
an attention block boundary) against transformers on each prompt alone. Decode: step by step
through the pool's KV blocks and recurrent-state slots against transformers with its cache.
"""

from __future__ import annotations

import torch

from engine_under_test.config import EngineConfig
from engine_under_test.memory.planner import plan_memory
from engine_under_test.model.forward_batch import ForwardBatch
from engine_under_test.model.weights import load_target
from engine_under_test.pool import UnifiedPool
from engine_under_test.runtime.caches import layer_caches
from engine_under_test.shapes import read_target_shape

MAX_REL_ERR = 1e-3
NUM_DECODE_STEPS = 6


def _rel_err(mine: torch.Tensor, ref: torch.Tensor) -> float:
    return float((mine - ref).abs().max() / ref.abs().max())


def _pool(model_dir, max_num_seqs: int = 2, device: str = "cpu"):
    cfg = EngineConfig(model=model_dir, max_num_seqs=max_num_seqs, max_model_len=256, max_num_batched_tokens=256,
                       kv_cache_memory_bytes=16 * 2**20, kv_cache_dtype="float32", mamba_cache_dtype="float32")
    plan = plan_memory(cfg, read_target_shape(model_dir), None)
    pool = UnifiedPool(plan.layout)
    pool.allocate(device)
    return pool


def _hf_model(model_dir):
    from transformers import Qwen3_5ForCausalLM

    hf, info = Qwen3_5ForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    return hf.eval()


def _hf_reference(hf, prompt: list[int]):
    with torch.no_grad():
        out = hf(torch.tensor([prompt]), use_cache=True)
        cache = getattr(out, "past_key_values", None) or out.cache
        prefill = out.logits[0]
        tokens, decode = [], []
        nxt = int(prefill[-1].argmax())
        for _ in range(NUM_DECODE_STEPS):
            tokens.append(nxt)
            out = hf(torch.tensor([[nxt]]), cache=cache, use_cache=True)
            decode.append(out.logits[0, -1])
            nxt = int(out.logits[0, -1].argmax())
    return prefill, tokens, torch.stack(decode)


def test_prefill_and_decode_match_transformers(tiny_checkpoints):
    target_dir, _ = tiny_checkpoints
    prompts = [[(7 * i + 3) % 1000 + 2 for i in range(75)], [(11 * i + 5) % 1000 + 2 for i in range(13)]]
    hf = _hf_model(target_dir)
    refs = [_hf_reference(hf, p) for p in prompts]

    model = load_target(target_dir)
    pool = _pool(target_dir)
    kv, state = layer_caches(pool, model.config.layer_types, 0)
    layout = pool.layout
    bs = layout.block_size_tokens
    # disjoint blocks per (group, sequence); block 0 stays the null block
    next_block = iter(range(1, layout.num_blocks))
    tables = {g.group_id: [[next(next_block) for _ in range(-(-256 // bs) if g.is_attention else 1)]
                           for _ in prompts] for g in layout.groups}
    attn_tables = {g: t for g, t in tables.items() if layout.groups[g].is_attention}
    state_slots = {g: [t[0] for t in tables[g]] for g in tables if layout.groups[g].is_state}

    def run(token_lists, starts, fresh):
        ids = torch.tensor([t for tl in token_lists for t in tl])
        pos = torch.tensor([s + j for tl, s in zip(token_lists, starts) for j in range(len(tl))])
        qsl = [0]
        for tl in token_lists:
            qsl.append(qsl[-1] + len(tl))
        batch = ForwardBatch(
            positions=pos, query_start_loc=qsl, seq_lens=[s + len(tl) for tl, s in zip(token_lists, starts)],
            block_tables=attn_tables, block_size_tokens=bs, causal=True,
            state_in_slots=state_slots, state_fresh=[fresh] * len(token_lists),
            state_save_positions=[[len(tl) - 1] for tl in token_lists],
            state_save_slots={g: [[s] for s in slots] for g, slots in state_slots.items()})
        hidden, _ = model(ids, batch, kv, state)
        return model.compute_logits(hidden), qsl

    logits, qsl = run(prompts, [0, 0], fresh=True)
    prefill_errs = [_rel_err(logits[qsl[b]:qsl[b + 1]], refs[b][0]) for b in range(2)]

    decode_errs = []
    lengths = [len(p) for p in prompts]
    for step in range(NUM_DECODE_STEPS):
        toks = [[refs[b][1][step]] for b in range(2)]
        logits, _ = run(toks, lengths, fresh=False)
        lengths = [n + 1 for n in lengths]
        decode_errs += [_rel_err(logits[b], refs[b][2][step]) for b in range(2)]

    print(f"max rel err prefill {max(prefill_errs):.2e} decode {max(decode_errs):.2e}")
    assert max(prefill_errs) < MAX_REL_ERR, prefill_errs
    assert max(decode_errs) < MAX_REL_ERR, decode_errs
