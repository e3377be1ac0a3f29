"""Greedy verification and the drafter's query block on the device: the one-sync decode step.

A uniform decode step of B sequences (runtime/decode_graphs.py) feeds each sequence L = 1 + k
inputs, its last known token and k drafts; the target's argmax of every input row is
`argmax` [B, L] (row j scores the token after input j). When every request is greedy, the
step's verification and the drafter's inputs depend on nothing the host must decide after the
target ran, so they run here, in fixed shapes, between the target and drafter graphs:

    accepted_lengths(argmax, drafts) -> m [B]:  the real drafter judged: the leading run of
        d_j == argmax[j - 1] (j = 1..k; a draft id < 0, a padded slot, never matches), as
        `verify.verify` rules.
    modeled_accepted_lengths(drafts, draws, thresholds) -> m [B]:  a fixed / synthetic
        `AcceptanceModel` (acceptance.py): the leading run of d_j >= 0 and draws[j] < thresholds[j],
        so m is capped at the sequence's drafts before its first padded slot, as `verify.verify`
        caps `AcceptanceModel.accepted`. Exactly `accepted` for fixed and 0 / 1 rates; the same
        distribution, another random stream, for fractional rates.
    emitted_tokens(argmax, drafts, m) -> [B, L]:  the output tokens in the first m + 1 columns:
        the m accepted drafts as drafted, then argmax[m] (the correction, or the bonus after all
        k), as `verify.verify` emits for a greedy request under either rule (judged greedily the
        accepted drafts equal argmax[0 .. m - 1] anyway). Columns past m are the argmax.
    draft_query(argmax, m, num_computed, capacity_tokens, tables, ...) -> ({field: tensor}, drafting):
        the drafter's query block, the fields `StepFills.draft` (step_fills.py) fills on the host, with
        the same values: ids [argmax[m], mask x k], positions p .. p + k with
        p = num_computed + 1 + m (the last output token's position), seq_len p + k + 1, and the
        pool (block, row) of each position through the attention group's block table; and
        drafting [B] (1 or 0). A sequence whose `capacity_tokens` (its smallest block table
        times the block size) is below p + k + 1 has no room to draft (max_model_len): it gets
        the padded sequence's query (ids 0, position 0, seq_len 1, the null block 0, row 0) and
        drafting 0, as do padded sequences (capacity 0).

`StepTokens` is the one int64 device buffer every result of the step lands in (argmax,
accepted, drafting, the k drafts of every sequence, the emitted tokens), so one device-to-host
read returns the step; `read` is that read, `read_async` enqueues it into one of two pinned buffers and returns
a `PendingRead` whose `rows` waits for it (a pipelined step launches the next one first);
`unpack` turns the rows into per-request output tokens and drafts.

Every op is a fixed-shape elementwise, gather, scan or concatenation on device tensors: no
host read, no data-dependent shape (CUDA-graph capturable).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


def accepted_lengths(argmax: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
    """argmax [B, k + 1], drafts [B, k] (id < 0: padded) -> accepted drafts m [B] (int64)."""
    k = drafts.shape[1]
    match = (drafts >= 0) & (drafts == argmax[:, :k])
    return match.long().cumprod(dim=1).sum(dim=1)


def modeled_accepted_lengths(drafts: torch.Tensor, draws: torch.Tensor, thresholds: torch.Tensor) -> torch.Tensor:
    """drafts [B, k] (id < 0: padded), draws [B, k], thresholds [k] (int64, acceptance.py's grid)
    -> accepted drafts m [B] (int64): the leading run of positions with a draft and a draw below
    the position's threshold."""
    accept = (drafts >= 0) & (draws < thresholds[None, :])
    return accept.long().cumprod(dim=1).sum(dim=1)


def emitted_tokens(argmax: torch.Tensor, drafts: torch.Tensor, accepted: torch.Tensor) -> torch.Tensor:
    """argmax [B, k + 1], drafts [B, k], accepted m [B] -> [B, k + 1]: drafts[j] for j < m, else
    argmax[j]; a sequence's output tokens are its first m + 1 columns."""
    k = drafts.shape[1]
    inputs = torch.cat([drafts, argmax[:, k:]], dim=1)                        # [B, k + 1]
    columns = torch.arange(k + 1, device=argmax.device)[None, :]
    return torch.where(columns < accepted[:, None], inputs, argmax)


def draft_query(argmax: torch.Tensor, accepted: torch.Tensor, num_computed: torch.Tensor,
                capacity_tokens: torch.Tensor, tables: dict[int, torch.Tensor], block_size_tokens: int,
                mask_token_id: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The drafter's query block of every sequence (module docstring): ({dmeta field: tensor},
    drafting [B] int64), fields q_ids, q_pos, q_blk{g}, q_row{g} [B, k + 1] and q_seq_lens [B];
    `argmax` [B, k + 1], `accepted`, `num_computed`, `capacity_tokens` [B], `tables[g]` [B, W]."""
    B, k = argmax.shape[0], argmax.shape[1] - 1
    start = num_computed + 1 + accepted                                        # p [B]
    room = capacity_tokens >= start + k + 1                                    # [B] bool
    room_col = room[:, None]
    positions = start[:, None] + torch.arange(k + 1, device=argmax.device)     # [B, k + 1]
    positions = torch.where(room_col, positions, 0)
    bonus = argmax.gather(1, accepted[:, None])                                # [B, 1]
    ids = torch.cat([bonus, torch.full((B, k), mask_token_id, dtype=argmax.dtype, device=argmax.device)], 1)
    out = {"q_ids": torch.where(room_col, ids, 0), "q_pos": positions,
           "q_seq_lens": torch.where(room, start + k + 1, 1)}
    for g, table in tables.items():
        blocks = table.gather(1, positions // block_size_tokens)
        out[f"q_blk{g}"] = torch.where(room_col, blocks, 0)
        out[f"q_row{g}"] = positions % block_size_tokens
    return out, room.long()


@dataclass
class StepResultRows:
    """One step's results on the host, for its first n sequences."""
    argmax: np.ndarray        # [n, L]
    accepted: np.ndarray      # [n]
    drafting: np.ndarray      # [n] (0 / 1)
    drafts: np.ndarray        # [n, k]
    emitted: np.ndarray       # [n, L]: output tokens in the first accepted + 1 columns


class StepTokens:
    """The step's device results in one int64 buffer of `max_num_seqs` x (2 L + 2 + k) elements:
    views `argmax` [Bm * L], `accepted` [Bm], `drafting` [Bm], `drafts` [Bm * k], `emitted`
    [Bm * L] (each a fixed address a graph captures)."""

    def __init__(self, max_num_seqs: int, num_inputs: int, num_drafts: int, device: torch.device):
        Bm, L, k = max_num_seqs, num_inputs, num_drafts
        self.L, self.k = L, k
        self.buffer = torch.zeros(Bm * (2 * L + 2 + k), dtype=torch.long, device=device)
        self._bounds = {"argmax": (0, Bm * L), "accepted": (Bm * L, Bm * (L + 1)),
                        "drafting": (Bm * (L + 1), Bm * (L + 2)), "drafts": (Bm * (L + 2), Bm * (L + 2 + k)),
                        "emitted": (Bm * (L + 2 + k), Bm * (2 * L + 2 + k))}
        for name, (a, b) in self._bounds.items():
            setattr(self, name, self.buffer[a:b])
        self._cuda = device.type == "cuda"
        self._hosts = [torch.zeros(self.buffer.numel(), dtype=torch.long, pin_memory=self._cuda) for _ in range(2)]
        self._turn = 0

    @property
    def num_bytes(self) -> int:
        return self.buffer.numel() * self.buffer.element_size()

    def read(self, n: int) -> StepResultRows:
        """The step's one device-to-host read (a sync): the first n sequences' results."""
        return self.read_async().rows(n)

    def read_async(self) -> "PendingRead":
        """Enqueue the read of the buffer as it will be once the work enqueued so far ran; the
        pinned buffer it lands in is reused two reads later (collect it before then)."""
        host = self._hosts[self._turn]
        self._turn ^= 1
        host.copy_(self.buffer, non_blocking=True)
        event = None
        if self._cuda:
            event = torch.cuda.Event()
            event.record()
        return PendingRead(host, event, self._bounds, self.L, self.k)


class PendingRead:
    """One step's results on their way to the host (`StepTokens.read_async`)."""

    def __init__(self, host: torch.Tensor, event, bounds: dict, L: int, k: int):
        self._host, self._event, self._bounds, self.L, self.k = host, event, bounds, L, k

    def rows(self, n: int) -> StepResultRows:
        """Waits for the read (the step's one sync); the first n sequences' results."""
        if self._event is not None:
            self._event.synchronize()
        host = self._host.numpy()
        part = {name: host[a:b].copy() for name, (a, b) in self._bounds.items()}
        return StepResultRows(argmax=part["argmax"][:n * self.L].reshape(n, self.L),
                              accepted=part["accepted"][:n], drafting=part["drafting"][:n],
                              drafts=part["drafts"][:n * self.k].reshape(n, self.k),
                              emitted=part["emitted"][:n * self.L].reshape(n, self.L))


def unpack(rows: StepResultRows, req_ids: list[str]) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """-> (sampled, drafts): per request the output tokens emitted[0 .. m] (the m accepted drafts,
    then the bonus / correction argmax[m]: `emitted_tokens`), and the drafts of the requests
    that drafted."""
    sampled, drafts = {}, {}
    for b, rid in enumerate(req_ids):
        sampled[rid] = rows.emitted[b, :int(rows.accepted[b]) + 1].tolist()
        if rows.drafting[b]:
            drafts[rid] = rows.drafts[b].tolist()
    return sampled, drafts
