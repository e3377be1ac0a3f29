"""Prompt chunks of different lengths in one pass run as one ragged group, padded to the longest,
and each sequence still computes what transformers computes on it alone (float32, CPU).

Grouping (`ForwardBatch.groups`): chunks that save only their last state merge while the pad rows
stay within MAX_PADDING_FRACTION of their real rows; verify rows (several saved states) and chunks
too short beside the longest keep their own groups. Through the target: a pass of four prompts of
75 .. 66 tokens, then a pass of two prompts in two ragged chunks each (the second continuing from
the states the first saved at each sequence's own last input), then decode steps that read those
states and K/V, each against transformers on the prompt alone. The pad rows would otherwise move
the recurrent and conv states past a shorter sequence's last input, and the decode steps see it.
"""

from __future__ import annotations

import pytest
import torch

from engine_under_test.model.forward_batch import MAX_PADDING_FRACTION, ForwardBatch
from engine_under_test.model.weights import load_target
from engine_under_test.runtime.caches import layer_caches
from tests.engine_under_test.model.test_hf_parity import MAX_REL_ERR, _hf_model, _hf_reference, _pool, _rel_err

NUM_DECODE_STEPS = 4


def _batch(lengths: list[int], saves: list[list[int]] | None = None) -> ForwardBatch:
    """A pass over sequences of `lengths` inputs from position 0 (one block each, no tables)."""
    qsl = [0]
    for n in lengths:
        qsl.append(qsl[-1] + n)
    pos = [j for n in lengths for j in range(n)]
    return ForwardBatch(positions=torch.tensor(pos), positions_list=pos, query_start_loc=qsl, seq_lens=list(lengths),
                        block_tables={}, block_size_tokens=16,
                        state_save_positions=saves if saves is not None else [[n - 1] for n in lengths])


def test_chunks_of_near_lengths_form_one_ragged_group():
    batch = _batch([512] * 15 + [368])                 # step 2 of the ladder's c = 32 wave
    assert batch.groups() == [(list(range(16)), 512)]
    assert batch.is_ragged(list(range(16)), 512) and not batch.covers_all(list(range(16)), 512)


def test_padding_beyond_the_bound_keeps_a_length_apart():
    assert MAX_PADDING_FRACTION == 1 / 8
    assert _batch([64, 50]).groups() == [([0, 1], 64)]                  # 14 pad rows <= 114 / 8
    assert _batch([64, 49]).groups() == [([1], 49), ([0], 64)]          # 15 pad rows > 113 / 8
    assert _batch([64, 1, 1]).groups() == [([1, 2], 1), ([0], 64)]      # decode rows beside a prompt
    assert _batch([64, 60, 30, 28]).groups() == [([2, 3], 30), ([0, 1], 64)]   # two ragged groups


def test_rows_that_save_several_states_are_never_padded():
    k = 4
    verify = [[j for j in range(k + 1)]]                  # a verify row saves after each of its inputs
    batch = _batch([k + 1, k + 2], saves=verify + [[k + 1]])
    assert batch.groups() == [([0], k + 1), ([1], k + 2)]
    assert not any(batch.is_ragged(seqs, n) for seqs, n in batch.groups())


def test_equal_lengths_group_as_before():
    batch = _batch([9, 30, 9, 30])
    assert batch.groups() == [([0, 2], 9), ([1, 3], 30)]
    assert not any(batch.is_ragged(seqs, n) for seqs, n in batch.groups())


def test_pad_rows_are_never_written_back():
    batch = _batch([8, 7])
    (seqs, L), = batch.groups()
    assert L == 8 and batch.real_mask(seqs, L).tolist() == [[True] * 8, [True] * 7 + [False]]
    x = torch.arange(15.0)
    assert batch.gather(x, seqs, L).tolist() == [list(range(8)), list(range(8, 15)) + [14]]   # a pad row repeats
    out = torch.full((15,), -1.0)
    batch.scatter_(out, torch.arange(100.0, 116.0), seqs, L)
    assert out.tolist() == list(range(100, 115))                                # row 115 (the pad) is dropped


@pytest.fixture(scope="module")
def target(tiny_checkpoints):
    return tiny_checkpoints[0], _hf_model(tiny_checkpoints[0])


def _runner(target_dir, num_seqs: int, device: str = "cpu", dtype: torch.dtype = torch.float32):
    """run(token_lists, starts, fresh) -> (logits, query_start_loc, groups, batch) over the pool."""
    model = load_target(target_dir, device, dtype)
    pool = _pool(target_dir, max_num_seqs=num_seqs, device=device)
    kv, state = layer_caches(pool, model.config.layer_types, 0)
    layout = pool.layout
    bs = layout.block_size_tokens
    next_block = iter(range(1, layout.num_blocks))
    tables = {g.group_id: [[next(next_block) for _ in range(-(-256 // bs) if g.is_attention else 1)]
                           for _ in range(num_seqs)] for g in layout.groups}
    attn_tables = {g: t for g, t in tables.items() if layout.groups[g].is_attention}
    state_slots = {g: [t[0] for t in tables[g]] for g in tables if layout.groups[g].is_state}

    def run(token_lists, starts, fresh):
        ids = torch.tensor([t for tl in token_lists for t in tl], device=device)
        pos = [s + j for tl, s in zip(token_lists, starts) for j in range(len(tl))]
        qsl = [0]
        for tl in token_lists:
            qsl.append(qsl[-1] + len(tl))
        batch = ForwardBatch(
            positions=torch.tensor(pos, device=device), positions_list=pos, query_start_loc=qsl,
            seq_lens=[s + len(tl) for tl, s in zip(token_lists, starts)],
            block_tables=attn_tables, block_size_tokens=bs, causal=True,
            state_in_slots=state_slots, state_fresh=[fresh] * len(token_lists),
            state_save_positions=[[len(tl) - 1] for tl in token_lists],
            state_save_slots={g: [[s] for s in slots] for g, slots in state_slots.items()})
        hidden, _ = model(ids, batch, kv, state)
        return model.compute_logits(hidden), qsl, batch.groups(), batch
    return run


def _decode_errs(run, refs, lengths) -> list[float]:
    errs = []
    for step in range(NUM_DECODE_STEPS):
        logits, _, _, _ = run([[ref[1][step]] for ref in refs], lengths, fresh=False)
        lengths = [n + 1 for n in lengths]
        errs += [_rel_err(logits[b], ref[2][step]) for b, ref in enumerate(refs)]
    return errs


def test_a_ragged_prefill_matches_transformers_on_each_prompt(target):
    target_dir, hf = target
    prompts = [[(7 * i + 3 * b) % 1000 + 2 for i in range(n)] for b, n in enumerate((75, 70, 68, 66))]
    refs = [_hf_reference(hf, p) for p in prompts]
    run = _runner(target_dir, len(prompts))
    logits, qsl, groups, batch = run(prompts, [0] * len(prompts), fresh=True)
    assert groups == [([0, 1, 2, 3], 75)] and batch.is_ragged([0, 1, 2, 3], 75)
    prefill = [_rel_err(logits[qsl[b]:qsl[b + 1]], ref[0]) for b, ref in enumerate(refs)]
    decode = _decode_errs(run, refs, [len(p) for p in prompts])
    print(f"max rel err prefill {max(prefill):.2e} decode {max(decode):.2e}")
    assert max(prefill) < MAX_REL_ERR, prefill
    assert max(decode) < MAX_REL_ERR, decode


def test_ragged_chunks_continue_from_each_sequences_own_last_state(target):
    target_dir, hf = target
    prompts = [[(5 * i + 11 * b) % 1000 + 2 for i in range(n)] for b, n in enumerate((76, 68))]
    refs = [_hf_reference(hf, p) for p in prompts]
    run = _runner(target_dir, len(prompts))
    cut = (40, 36)
    first, qsl1, groups1, _ = run([p[:c] for p, c in zip(prompts, cut)], [0, 0], fresh=True)
    second, qsl2, groups2, _ = run([p[c:] for p, c in zip(prompts, cut)], list(cut), fresh=False)
    assert groups1 == [([0, 1], 40)] and groups2 == [([0, 1], 36)]
    prefill = [_rel_err(torch.cat([first[qsl1[b]:qsl1[b + 1]], second[qsl2[b]:qsl2[b + 1]]]), ref[0])
               for b, ref in enumerate(refs)]
    decode = _decode_errs(run, refs, [len(p) for p in prompts])
    print(f"max rel err prefill {max(prefill):.2e} decode {max(decode):.2e}")
    assert max(prefill) < MAX_REL_ERR, prefill
    assert max(decode) < MAX_REL_ERR, decode


RAGGED_PROMPT_LENGTHS = (75, 70, 68, 66)


def ragged_pass_logits(target_dir, device: str, dtype: torch.dtype) -> torch.Tensor:
    """Float32 logits (on the CPU) of a ragged prefill of RAGGED_PROMPT_LENGTHS, then of
    NUM_DECODE_STEPS decode steps of fixed tokens that read the states it saved: what
    test_gpu_kernels.py compares between CUDA (fla's kernels over the pad rows) and the CPU."""
    prompts = [[(7 * i + 3 * b) % 1000 + 2 for i in range(n)] for b, n in enumerate(RAGGED_PROMPT_LENGTHS)]
    run = _runner(target_dir, len(prompts), device, dtype)
    logits, _, groups, _ = run(prompts, [0] * len(prompts), fresh=True)
    assert groups == [(list(range(len(prompts))), max(RAGGED_PROMPT_LENGTHS))]
    out, lengths = [logits.float().cpu()], list(RAGGED_PROMPT_LENGTHS)
    for step in range(NUM_DECODE_STEPS):
        logits, _, _, _ = run([[11 + 17 * b + step] for b in range(len(prompts))], lengths, fresh=False)
        out.append(logits.float().cpu())
        lengths = [n + 1 for n in lengths]
    return torch.cat(out)
