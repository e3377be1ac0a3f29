"""The metadata one forward pass needs: token positions, block tables, state slots.

Tokens of B sequences are flattened (sequence-major); sequence b owns tokens
`query_start_loc[b] : query_start_loc[b + 1]`. The pool is split into cache groups, each with
its own block ids per sequence (`block_tables[group_id][b]`, `block_size_tokens` tokens per
attention block). An attention layer of group gid reads and writes:

    token at position p of sequence b  ->  block block_tables[gid][b][p // block_size_tokens],
                                           row p % block_size_tokens

A Gated-DeltaNet layer of state group gid reads the state in block `state_in_slots[gid][b]`
(zeros when `state_fresh[b]`) and writes the state after query position
`state_save_positions[b][j]` into block `state_save_slots[gid][b][j]`.

Sequences are computed in groups (`groups()`), each as one batch [G, L]. Sequences with equal
query length form a group. Sequences whose pass saves only the state after their last input (prompt
chunks) may also form one ragged group of different lengths, padded to the longest (L), while the
padding stays within 1/8 of their tokens (`MAX_PADDING_FRACTION`): a pad row repeats its sequence's
last input, its output is never written back (`scatter_`), and the Gated-DeltaNet layers give it a
gate of 0 and a step size of 0, which leaves the recurrent state as it is (`real_mask`). So a step
of prompt chunks of several lengths costs the launches of one group, not one a length.

Index tensors derived from this metadata (token indices, padded block tables, masks, state
slots) are built once per pass and shared by every layer (`memo`); host lists reach a CUDA
device through pinned memory without a stream sync (`device_tensor`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

import torch

MAX_PADDING_FRACTION = 1 / 8     # a ragged group's pad rows, at most this share of its real rows


def device_tensor(values: list, device: torch.device, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """`values` as a tensor on `device`; on CUDA the copy is asynchronous (pinned staging)."""
    t = torch.tensor(values, dtype=dtype)
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


class LayerCache(NamedTuple):
    """A layer's two pool views (k, v) or (conv, ssm) and the cache group whose block ids index them."""

    first: torch.Tensor
    second: torch.Tensor
    group_id: int


@dataclass
class ForwardBatch:
    positions: torch.Tensor                              # [T] int64
    query_start_loc: list[int]                           # [B + 1]
    seq_lens: list[int]                                  # [B] attention KV length after this pass
    block_tables: dict[int, list[list[int]]]             # group -> [B][num_blocks_b]
    block_size_tokens: int
    causal: bool = True
    state_in_slots: dict[int, list[int]] = field(default_factory=dict)
    state_fresh: list[bool] = field(default_factory=list)
    state_save_positions: list[list[int]] = field(default_factory=list)
    state_save_slots: dict[int, list[list[int]]] = field(default_factory=dict)
    positions_list: list[int] | None = None              # `positions` on the host (read from it if None)

    def __post_init__(self) -> None:
        if len(self.query_start_loc) != len(self.seq_lens) + 1:
            raise ValueError("query_start_loc must have one more entry than seq_lens")
        for gid, tables in self.block_tables.items():
            for b, n in enumerate(self.seq_lens):
                need = -(-n // self.block_size_tokens)
                if len(tables[b]) < need:
                    raise ValueError(f"group {gid}, sequence {b}: block table holds {len(tables[b])} blocks, "
                                     f"{n} tokens need {need}")
        self._device = self.positions.device
        self._groups: list[tuple[list[int], int]] | None = None
        self._slot_mappings: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._memo: dict[Any, Any] = {}
        if self.positions_list is None:
            self.positions_list = self.positions.tolist()

    def memo(self, key: Any, build: Callable[[], Any]) -> Any:
        """`build()` once per pass for `key`; later layers reuse the result."""
        if key not in self._memo:
            self._memo[key] = build()
        return self._memo[key]

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens)

    def query_len(self, b: int) -> int:
        return self.query_start_loc[b + 1] - self.query_start_loc[b]

    def groups(self) -> list[tuple[list[int], int]]:
        """[(sequence indices, query length L)]: ragged groups of prompt chunks padded to their
        longest (`is_ragged`), then one group per distinct non-zero query length of the rest;
        ordered by L."""
        if self._groups is None:
            lens = {b: self.query_len(b) for b in range(self.num_seqs) if self.query_len(b) > 0}
            ragged = _ragged_groups(sorted((b for b in lens if self._saves_last_only(b)), key=lambda b: -lens[b]),
                                    lens)
            merged = {b for seqs, _ in ragged for b in seqs}
            by_len: dict[int, list[int]] = {}
            for b, n in lens.items():
                if b not in merged:
                    by_len.setdefault(n, []).append(b)
            equal = [(seqs, n) for n, seqs in by_len.items()]
            self._groups = sorted(ragged + equal, key=lambda group: (group[1], group[0]))
        return self._groups

    def _saves_last_only(self, b: int) -> bool:
        """The pass saves sequence b's state after its last input only (a prompt chunk)."""
        saves = self.state_save_positions[b] if b < len(self.state_save_positions) else None
        return saves == [self.query_len(b) - 1]

    def is_ragged(self, seqs: list[int], query_len: int) -> bool:
        """Some sequence of the group is shorter than L: the group holds pad rows."""
        return any(self.query_len(b) != query_len for b in seqs)

    def token_index(self, seqs: list[int], query_len: int) -> torch.Tensor:
        """[G, L] flat token indices of the given sequences (a pad row: its sequence's last token)."""
        def build() -> torch.Tensor:
            rows = [[self.query_start_loc[b] + min(j, self.query_len(b) - 1) for j in range(query_len)] for b in seqs]
            return device_tensor(rows, self._device)
        return self.memo(("token_index", tuple(seqs), query_len), build)

    def real_mask(self, seqs: list[int], query_len: int) -> torch.Tensor:
        """[G, L] bool: the row is one of its sequence's inputs (False: a pad row)."""
        return self.memo(("real_mask", tuple(seqs), query_len), lambda: device_tensor(
            [[j < self.query_len(b) for j in range(query_len)] for b in seqs], self._device, torch.bool))

    def covers_all(self, seqs: list[int], query_len: int) -> bool:
        """The group is every token of the pass, in order (then gathers are views)."""
        return len(seqs) == self.num_seqs and len(seqs) * query_len == self.query_start_loc[-1]

    def gather(self, x: torch.Tensor, seqs: list[int], query_len: int) -> torch.Tensor:
        """x [T, ...] -> the group's rows [G, L, ...] (a view when `covers_all`)."""
        if self.covers_all(seqs, query_len):
            return x.unflatten(0, (len(seqs), query_len))
        return x[self.token_index(seqs, query_len)]

    def scatter_(self, out: torch.Tensor, values: torch.Tensor, seqs: list[int], query_len: int) -> None:
        """out[T, ...] <- the group's rows `values` [G * L, ...] (pad rows are not written)."""
        if self.covers_all(seqs, query_len):
            out.copy_(values.reshape(out.shape))
        elif self.is_ragged(seqs, query_len):
            tokens, rows = self.memo(("ragged_rows", tuple(seqs), query_len), lambda: tuple(device_tensor([
                [self.query_start_loc[b] + j for b in seqs for j in range(self.query_len(b))],
                [g * query_len + j for g, b in enumerate(seqs) for j in range(self.query_len(b))]], self._device)))
            out[tokens] = values[rows]
        else:
            out[self.token_index(seqs, query_len).flatten()] = values

    def padded_block_table(self, group_id: int, seqs: list[int], num_blocks: int) -> torch.Tensor:
        """[G, num_blocks] block ids; short tables are padded with their own first block, which
        the attention mask never lets a query read."""
        tables = self.block_tables[group_id]
        rows = [(tables[b] + [tables[b][0]] * num_blocks)[:num_blocks] for b in seqs]
        return device_tensor(rows, self._device)

    def slot_mapping(self, group_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """([T] block id, [T] row in block) of every token, in that group's block tables."""
        if group_id not in self._slot_mappings:
            self._slot_mappings[group_id] = slots_for(self.block_tables[group_id], self.query_start_loc,
                                                      self.positions_list, self.block_size_tokens, self._device)
        return self._slot_mappings[group_id]


def _ragged_groups(candidates: list[int], lens: dict[int, int]) -> list[tuple[list[int], int]]:
    """Ragged groups of `candidates` (longest first): each takes the longest left, then every
    shorter one whose pad rows keep the group's within MAX_PADDING_FRACTION of its real rows.
    Only groups of two lengths or more are returned; the others' sequences are left to the
    equal-length grouping."""
    groups, left = [], list(candidates)
    while left:
        longest = lens[left[0]]
        seqs, real = [], 0
        for b in left:
            if (len(seqs) + 1) * longest - (real + lens[b]) <= MAX_PADDING_FRACTION * (real + lens[b]):
                seqs.append(b)
                real += lens[b]
        taken = set(seqs)
        left = [b for b in left if b not in taken]
        if len({lens[b] for b in seqs}) > 1:
            groups.append((sorted(seqs), longest))
    return groups


def slots_for(tables: list[list[int]], query_start_loc: list[int], positions: list[int],
              block_size_tokens: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(block ids, rows) on `device` of tokens at host `positions`, sequence b owning
    query_start_loc[b]:[b+1]."""
    blocks, rows = [], []
    for b in range(len(query_start_loc) - 1):
        for t in range(query_start_loc[b], query_start_loc[b + 1]):
            blocks.append(tables[b][positions[t] // block_size_tokens])
            rows.append(positions[t] % block_size_tokens)
    both = device_tensor([blocks, rows], device)
    return both[0], both[1]
