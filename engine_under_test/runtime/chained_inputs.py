"""A pipelined decode step's inputs, computed on the device from the previous step's results.

With async scheduling (EngineConfig.async_scheduling, vLLM's GPU default) the scheduler plans
step n + 1 before step n's results are read: it counts each running request's 1 + k inputs of
step n as computed (num_computed_tokens is optimistic: every draft accepted) and gives it k
placeholder drafts. When both steps are captured decode steps (runtime/decode_graphs.py), step
n + 1 is launched right behind step n, and what the host does not know yet is derived here, in
fixed shapes, from step n's `StepTokens` still on the device:

    r = prev_row[b]                       the sequence's row in step n (< 0: padding, untouched)
    m = accepted[r]                       drafts step n accepted
    ids = [argmax[r, m], d_1 .. d_k]      the bonus token, then step n's drafts (drafting[r],
                                          else k padded drafts -1, embedded as token 0)
    num_computed = nc_opt[b] - (k - m)    the host's optimistic count less step n's rejections
    positions, seq_len, pool (block, row) through the block table, as the host fill computes
    src[s] = slots[s][b, m]               the state slot step n's commit wrote

`host_resolved` is the same function on the host, for a planned step that cannot be launched
this way after all: it rewrites the step's requests once step n's results are read.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from engine_under_test.scheduler.output import ScheduledRequest, SchedulerOutput


def chain_inputs(argmax: torch.Tensor, accepted: torch.Tensor, drafting: torch.Tensor, drafts: torch.Tensor,
                 prev_row: torch.Tensor, nc_opt: torch.Tensor, tables: dict[int, torch.Tensor],
                 slots: dict[int, torch.Tensor], k: int, block_size_tokens: int
                 ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """-> (valid [B] bool, {decode buffer field: value}) for the B sequences of step n + 1:
    ids, pos, blk{g}, row{g} [B, L]; seq_lens, src{s} [B]; drafts [B, k]. `argmax` [Bm * L],
    `accepted`, `drafting` [Bm], `drafts` [Bm * k] are step n's results; `prev_row`, `nc_opt`
    [B]; `tables[g]` [B, W]; `slots[s]` [B, L]. Rows that are not valid hold garbage the caller
    discards (their values stay in range: position 0)."""
    L = k + 1
    valid = prev_row >= 0
    row = prev_row.clamp(min=0)
    m = accepted[row].clamp(0, k)                                               # [B]
    bonus = argmax.view(-1, L)[row].gather(1, m[:, None])                       # [B, 1]
    d = torch.where(drafting[row][:, None] != 0, drafts.view(-1, k)[row], -1)   # [B, k]
    nc = torch.where(valid, nc_opt - (k - m), 0)
    pos = nc[:, None] + torch.arange(L, device=nc.device)                      # [B, L]
    out = {"ids": torch.cat([bonus, d.clamp(min=0)], dim=1), "pos": pos, "seq_lens": nc + L, "drafts": d}
    for g, table in tables.items():
        out[f"blk{g}"] = table.gather(1, pos // block_size_tokens)
        out[f"row{g}"] = pos % block_size_tokens
    for s, table in slots.items():
        out[f"src{s}"] = table.gather(1, m[:, None])[:, 0]
    return valid, out


def host_resolved(out: SchedulerOutput, sampled: dict[str, list[int]], drafts: dict[str, list[int]],
                  chained: set[str], k: int) -> SchedulerOutput:
    """`out` (planned before the previous step's results) with the chained requests' inputs as
    `chain_inputs` computes them: the previous step's m accepted drafts roll back
    num_computed_tokens by k - m, the inputs become the bonus token and the previous step's
    drafts (or k padded ones). `sampled` / `drafts` are the previous step's results."""
    reqs = []
    for sr in out.scheduled:
        if sr.req_id not in chained or sr.req_id not in sampled:
            reqs.append(sr)
            continue
        toks = sampled[sr.req_id]
        m = len(toks) - 1
        d = tuple(drafts.get(sr.req_id, [-1] * k))
        reqs.append(replace(sr, num_computed_tokens=sr.num_computed_tokens - (k - m), token_ids=(toks[-1], *d),
                            spec_token_ids=d))
    return replace(out, scheduled=tuple(reqs))
