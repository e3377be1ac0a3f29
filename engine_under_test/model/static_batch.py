"""A forward batch whose metadata already lives on the device in fixed-shape buffers: what a
CUDA graph captures (runtime/decode_graphs.py).

Every one of the B sequences (real ones first, then padding) has the same query length L, so
the pass is one group covering every token; the model layers use the same calls as with a
`ForwardBatch` (`groups`, `gather`, `scatter_`, `slot_mapping`, `memo`), answered from the
buffers without any host list or host-to-device copy:

    positions      [B * L]          token positions
    slots[gid]     ([B * L], [B * L])  pool (block, row) of each token's K/V
    block_table[gid] [B, W]         block ids (padding: the null block 0)
    seq_lens       [B]              KV length after the pass (padding: 1)
    state slots    per state group: src [B], fresh [B], dst [B, L], save [B, L]
    real_mask      [B, L] bool, optional: False marks a pad row (a captured prefill pass,
                   runtime/prefill_graphs.py: each sequence padded to its bucket)
    own_keys       every sequence is a new prompt: its keys are this pass's rows only (a
                   captured prefill pass of several prompts)

Padded sequences read and write only the null block 0, which no request owns.
`paged_attention` sees `is_static` and reads the pool in place: on CUDA the Triton kernel for
queries of at most KERNEL_MAX_QUERY_LEN rows a sequence (decode, verify, the drafter's query
block; its tiles hold a program's rows), elsewhere and for longer queries (a captured prefill) a
torch reference that gathers through the same table and runs masked SDPA. With `own_keys` (new
prompts, each padded at its end) the keys are read back from the pool rows this pass wrote
(`slot_mapping`) and attention is causal SDPA over each sequence's own L rows: no table is
gathered, and no input's query reaches a pad row, which all come after the inputs.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from engine_under_test.model.gated_delta_net import PLAIN_BATCH

KERNEL_MAX_QUERY_LEN = 32      # the paged attention kernel's rows a sequence (its tile: query heads x rows)


class StaticBatch:
    is_static = True

    def __init__(self, num_seqs: int, query_len: int, block_size_tokens: int, causal: bool,
                 positions: torch.Tensor, seq_lens: torch.Tensor, block_tables: dict[int, torch.Tensor],
                 slots: dict[int, tuple[torch.Tensor, torch.Tensor]], real_mask: torch.Tensor | None = None,
                 own_keys: bool = False):
        if own_keys and not causal:
            raise ValueError("static batch: own_keys is a causal pass over new prompts")
        self._num_seqs, self.query_len = num_seqs, query_len
        self._real_mask = real_mask
        self.own_keys = own_keys
        self.block_size_tokens, self.causal = block_size_tokens, causal
        self.positions, self.seq_lens_t = positions, seq_lens
        self.block_tables_t, self._slots = block_tables, slots
        self.query_start_loc = [i * query_len for i in range(num_seqs + 1)]
        # fla's chunked rule takes the B sequences as its plain batch: no packing is built on the host
        self._memo: dict[Any, Any] = {("fla_varlen", num_seqs, query_len): PLAIN_BATCH}

    @property
    def num_seqs(self) -> int:
        return self._num_seqs

    def memo(self, key: Any, build: Callable[[], Any]) -> Any:
        if key not in self._memo:
            if key[0] == "state_slots":
                raise KeyError(f"static batch: state slots of group {key[1]} were not set")
            self._memo[key] = build()
        return self._memo[key]

    def set_state_slots(self, group_id: int, slots: Any) -> None:
        """The StateSlots (linear_attention.StateSlots) of one state group, fixed buffers."""
        self._memo[("state_slots", group_id, tuple(range(self._num_seqs)), self.query_len)] = slots

    def groups(self) -> list[tuple[list[int], int]]:
        return [(list(range(self._num_seqs)), self.query_len)]

    def covers_all(self, seqs: list[int], query_len: int) -> bool:
        return True

    def is_ragged(self, seqs: list[int], query_len: int) -> bool:
        return False

    def real_mask(self, seqs: list[int], query_len: int) -> torch.Tensor:
        """[B, L] bool: the row is one of its sequence's inputs (given at construction)."""
        if self._real_mask is None:
            raise KeyError("static batch: no real-row mask was given (a pass without pad rows)")
        return self._real_mask

    def gather(self, x: torch.Tensor, seqs: list[int], query_len: int) -> torch.Tensor:
        return x.unflatten(0, (self._num_seqs, query_len))

    def scatter_(self, out: torch.Tensor, values: torch.Tensor, seqs: list[int], query_len: int) -> None:
        out.copy_(values.reshape(out.shape))

    def slot_mapping(self, group_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self._slots[group_id]


def static_paged_attention(q: torch.Tensor, batch: StaticBatch, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           group_id: int, scale: float) -> torch.Tensor:
    """q [B * L, H, D] over the pool through the batch's device block table -> [B * L, H, D]."""
    if batch.own_keys:
        return _own_keys(q, batch, k_cache, v_cache, group_id, scale)
    table = batch.block_tables_t[group_id]
    if q.is_cuda and batch.query_len <= KERNEL_MAX_QUERY_LEN:
        from engine_under_test.model.paged_attention_kernel import paged_attention_in_place

        return paged_attention_in_place(q, k_cache, v_cache, table, batch.seq_lens_t,
                                        batch.positions if batch.causal else None, batch.query_len, scale,
                                        batch.causal)
    return _reference(q, batch, k_cache, v_cache, table, scale)


def _reference(q: torch.Tensor, batch: StaticBatch, k_cache: torch.Tensor, v_cache: torch.Tensor,
               table: torch.Tensor, scale: float) -> torch.Tensor:
    """The same function by gathering the table's blocks and masked SDPA (CPU, and checks)."""
    B, L = batch.num_seqs, batch.query_len
    T, H, D = q.shape
    hkv = k_cache.shape[2]
    rep = H // hkv
    keys = k_cache[table].flatten(1, 2).transpose(1, 2).to(q.dtype)          # [B, Hkv, S, D]
    values = v_cache[table].flatten(1, 2).transpose(1, 2).to(q.dtype)
    kv_pos = torch.arange(keys.shape[2], device=q.device)
    mask = kv_pos[None, None, :] < batch.seq_lens_t[:, None, None]           # [B, 1, S]
    if batch.causal:
        mask = mask & (kv_pos[None, None, :] <= batch.positions.view(B, L)[:, :, None])   # [B, L, S]
    mask = mask.expand(B, L, -1)[:, None].expand(B, rep, L, -1).reshape(B, 1, rep * L, -1)
    qg = q.view(B, L, hkv, rep, D).permute(0, 2, 3, 1, 4).reshape(B, hkv, rep * L, D)
    o = F.scaled_dot_product_attention(qg, keys, values, attn_mask=mask, scale=scale)
    return o.view(B, hkv, rep, L, D).permute(0, 3, 1, 2, 4).reshape(T, H, D)


def _own_keys(q: torch.Tensor, batch: StaticBatch, k_cache: torch.Tensor, v_cache: torch.Tensor,
              group_id: int, scale: float) -> torch.Tensor:
    """New prompts: each sequence's keys are the K/V this pass wrote at its rows (read back
    through the slot mapping; pad rows read the null block), causal SDPA per sequence. Query head
    h reads KV head h // (H / Hkv), as the table path's folding does."""
    B, L = batch.num_seqs, batch.query_len
    T, H, D = q.shape
    blk, row = batch.slot_mapping(group_id)
    keys, values = k_cache[blk, row].to(q.dtype), v_cache[blk, row].to(q.dtype)       # [T, Hkv, D]
    hkv = keys.shape[1]
    # [T, Hkv, D] -> [B, H, L, D], KV head j repeated for query heads j rep .. j rep + rep - 1 (an expand: no sync)
    keys, values = (x.view(B, L, hkv, 1, D).expand(B, L, hkv, H // hkv, D).reshape(B, L, H, D).transpose(1, 2)
                    for x in (keys, values))
    o = F.scaled_dot_product_attention(q.view(B, L, H, D).transpose(1, 2), keys, values, is_causal=True, scale=scale)
    return o.transpose(1, 2).reshape(T, H, D)
