"""The memory planner: every byte the engine allocates for a config, inside the operator's bound.

Contract: `plan_memory(cfg, target, draft)` returns a `MemoryPlan` or raises `MemoryRefusal`
(a `ValueError` with the engine's message). The plan holds:
- `layout`: the unified pool (one page size, cache groups, `num_blocks`), see `pool.py`;
- `ledger`: weights (from shapes and dtypes), the pool's shares (attention_kv,
  recurrent_state, draft_kv), activations and graph workspace estimates;
- `per_sequence`: what ONE full-length sequence (max_model_len tokens) takes from the pool:
  attention blocks of every attention group + 1 + k state slots per state group (2 + k in
  align mode), as bytes per category; `max_concurrency` = num_blocks / blocks per sequence.
Bound: kv_cache_memory_bytes -> the pool gets exactly that many bytes (rounded down to whole
blocks); gpu_memory_utilization -> bound = util x device capacity, and weights + activations +
workspace + pool all fit inside it. Nothing is allocated outside the bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_under_test.config import EngineConfig
from engine_under_test.memory.groups import CacheGroup, group_layers
from engine_under_test.memory.ledger import Ledger
from engine_under_test.memory.specs import AttentionLayerSpec, build_layer_specs, cdiv
from engine_under_test.pool import PoolLayout, build_layout
from engine_under_test.shapes import DTYPE_SIZE_BYTES, DraftShape, TargetShape

# CUDA graphs of the decode step (runtime/decode_graphs.py, buffers in step_buffers.py): the fixed logits buffer of the
# largest captured batch (max_num_seqs x (1 + k) rows of the vocabulary, computed below) plus the
# graph pool's activations and fixed metadata buffers. Past the logits, capture took 0.137 GiB
# of the allocator on one H200 (2b shapes, k = 8, max_num_seqs 32: 0.27 GiB in all, 0.133 GiB of
# it the logits buffer); planned as 192 MiB. The verify pass's kept inputs are planned apart
# (`deferred_state_bytes`: the conv inputs, k, v and gates, 0.10 GiB at those shapes).
GRAPH_POOL_BASE_BYTES = 192 * 1024 * 1024
# The CUDA context and library handles (cuBLAS workspaces, kernel images) live in the process's
# device memory too: 0.71 GiB was measured on one H200 (torch 2.11, CUDA 13.0); planned as 1 GiB so
# that the process's whole device footprint stays inside gpu_memory_utilization x capacity.
CUDA_CONTEXT_BYTES = 1 << 30
NUM_NULL_BLOCKS = 1                    # block 0: the null page block tables pad with (as vLLM's BlockPool)


class MemoryRefusal(ValueError):
    """The bound cannot hold what the config needs; the message says how much and why."""


@dataclass(frozen=True)
class PerSequence:
    attention_kv_bytes: int
    recurrent_state_bytes: int
    draft_kv_bytes: int
    state_slots: int
    num_blocks: int

    @property
    def total_bytes(self) -> int:
        return self.attention_kv_bytes + self.recurrent_state_bytes + self.draft_kv_bytes


@dataclass(frozen=True)
class MemoryPlan:
    layout: PoolLayout
    ledger: Ledger
    per_sequence: PerSequence
    max_concurrency: float
    num_seats: int                # whole full-length sequences the pool holds
    seat_message: str | None      # set when num_seats < max_num_seqs: how many, and why


def state_slots_per_sequence(cfg: EngineConfig) -> int:
    """1 + k state slots (current + one per draft position); align mode keeps one more
    (the last block-boundary checkpoint), and one prefill checkpoint block where the GDN prefill
    kernel writes checkpoints (vLLM MambaSpec.max_memory_usage_bytes)."""
    if cfg.mamba_cache_mode != "align":
        return 1 + cfg.num_speculative_tokens
    return 2 + int(cfg.gdn_prefill_checkpoints) + cfg.num_speculative_tokens


def blocks_per_sequence(cfg: EngineConfig, group: CacheGroup) -> int:
    """Blocks a full-length sequence takes from `group` (vLLM `max_memory_usage_bytes / page`)."""
    if isinstance(group.spec, AttentionLayerSpec):
        return cdiv(cfg.max_model_len, group.spec.block_size_tokens)
    return state_slots_per_sequence(cfg)


def layer_category(layer_name: str, group: CacheGroup) -> str:
    if group.is_state:
        return "recurrent_state"
    return "draft_kv" if layer_name.startswith("draft.") else "attention_kv"


def _real_page_bytes(group: CacheGroup) -> int:
    spec = group.spec
    return spec.page_size_bytes if isinstance(spec, AttentionLayerSpec) else spec.state_bytes


def per_sequence_cost(cfg: EngineConfig, layout: PoolLayout) -> PerSequence:
    """Per layer: the blocks one full-length sequence uses x the page (padded state pages
    count whole, as the bytes they hold); `num_blocks` = block ids over all groups."""
    totals = {"attention_kv": 0, "recurrent_state": 0, "draft_kv": 0}
    num_blocks = 0
    for g in layout.groups:
        n = blocks_per_sequence(cfg, g)
        num_blocks += n
        for name in g.layer_names:
            totals[layer_category(name, g)] += n * layout.page_size_bytes
    return PerSequence(attention_kv_bytes=totals["attention_kv"], recurrent_state_bytes=totals["recurrent_state"],
                       draft_kv_bytes=totals["draft_kv"], state_slots=state_slots_per_sequence(cfg), num_blocks=num_blocks)


def pool_ledger(cfg: EngineConfig, layout: PoolLayout) -> dict[str, int]:
    """The pool's bytes by category. Blocks are shared among groups in proportion to what one
    full-length sequence needs from each (floored); a block of group g holds, per layer, its real
    page bytes of the layer's category and the state padding as `padding`; slots g does not use
    are `unused`; blocks left by the flooring are `unassigned`. Sums to the pool's bytes."""
    out = {"attention_kv": 0, "recurrent_state": 0, "draft_kv": 0, "padding": 0, "unused": 0}
    need = {g.group_id: blocks_per_sequence(cfg, g) for g in layout.groups}
    total_need = sum(need.values())
    assigned = 0
    for g in layout.groups:
        share = layout.num_blocks * need[g.group_id] // total_need
        assigned += share
        real = _real_page_bytes(g)
        for name in g.layer_names:
            out[layer_category(name, g)] += share * real
            out["padding"] += share * (layout.page_size_bytes - real)
        out["unused"] += share * (layout.num_page_slots - len(g.layer_names)) * layout.page_size_bytes
    out["unassigned"] = (layout.num_blocks - assigned) * layout.bytes_per_block
    return out


def weights_bytes(target: TargetShape, draft: DraftShape | None) -> int:
    total = target.num_params * DTYPE_SIZE_BYTES[target.dtype]
    if draft is not None:
        total += draft.num_params(target.hidden_size) * DTYPE_SIZE_BYTES[draft.dtype]
    return total


def activation_bytes(cfg: EngineConfig, target: TargetShape) -> int:
    """Peak forward activations for one step of max_num_batched_tokens, plus float32 logits and
    probabilities of every sampled row (max_num_seqs x (1 + k))."""
    esize = DTYPE_SIZE_BYTES[target.dtype]
    widest = 2 * target.intermediate_size
    a = target.attention
    widest = max(widest, target.num_attention_heads * a.head_dim * 2 + 2 * a.num_kv_heads * a.head_dim)
    if target.gdn is not None:
        g = target.gdn
        widest = max(widest, 2 * g.num_k_heads * g.head_k_dim + 2 * g.num_v_heads * g.head_v_dim + 2 * g.num_v_heads)
    per_token = esize * (2 * target.hidden_size + widest)
    rows = cfg.max_num_seqs * (1 + cfg.num_speculative_tokens)
    return cfg.max_num_batched_tokens * per_token + 2 * rows * target.vocab_size * 4


def graph_pool_bytes(cfg: EngineConfig, target: TargetShape) -> int:
    """What capturing the decode graphs takes from the allocator: the logits buffer of the largest
    captured batch in the model dtype, the verify pass's kept inputs (`deferred_state_bytes`) and
    GRAPH_POOL_BASE_BYTES."""
    rows = cfg.max_num_seqs * (1 + cfg.num_speculative_tokens)
    return (GRAPH_POOL_BASE_BYTES + rows * target.vocab_size * DTYPE_SIZE_BYTES[target.dtype]
            + deferred_state_bytes(cfg, target))


def deferred_state_bytes(cfg: EngineConfig, target: TargetShape) -> int:
    """The captured verify pass writes no recurrent state; each Gated-DeltaNet layer keeps its
    conv inputs (conv_dim), k and v (model dtype) and two gates (float32) of max_num_seqs x
    (1 + k) rows for the commit (model/deferred_states.py). 0 without speculative decoding (no
    deferred pass)."""
    if target.gdn is None or cfg.num_speculative_tokens == 0:
        return 0
    g, rows = target.gdn, cfg.max_num_seqs * (1 + cfg.num_speculative_tokens)
    per_row = ((g.conv_dim + g.num_k_heads * g.head_k_dim + g.num_v_heads * g.head_v_dim)
               * DTYPE_SIZE_BYTES[target.dtype] + 2 * g.num_v_heads * 4)
    return len(target.gdn_layer_ids) * rows * per_row


def workspace_bytes(cfg: EngineConfig, target: TargetShape) -> int:
    """Kernel scratch (float32 chunked delta-rule intermediates) plus the CUDA-graph estimate."""
    scratch = 0
    if target.gdn is not None:
        g = target.gdn
        scratch = cfg.max_num_batched_tokens * g.num_v_heads * g.head_v_dim * 4 * 2
    return scratch + graph_pool_bytes(cfg, target)


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def plan_memory(cfg: EngineConfig, target: TargetShape, draft: DraftShape | None) -> MemoryPlan:
    # Phase 1: one page size, groups, bytes per block.
    specs = build_layer_specs(cfg, target, draft)
    groups, group_size = group_layers(specs)
    probe = build_layout(1, groups, group_size)
    bytes_per_block = probe.bytes_per_block
    beside = {"weights": weights_bytes(target, draft), "activations": activation_bytes(cfg, target),
              "workspace": workspace_bytes(cfg, target)}
    if cfg.device.startswith("cuda"):
        beside["cuda_context"] = CUDA_CONTEXT_BYTES
    # Phase 2: the bound and the pool's share of it.
    if cfg.kv_cache_memory_bytes is not None:
        bound, kind = cfg.kv_cache_memory_bytes, "kv_cache_memory_bytes"
        pool_budget = bound
    else:
        bound, kind = int(cfg.gpu_memory_utilization * cfg.device_memory_bytes), "gpu_memory_utilization"
        pool_budget = bound - sum(beside.values())
        if pool_budget < bytes_per_block:
            raise MemoryRefusal(
                f"gpu_memory_utilization {cfg.gpu_memory_utilization} of {_gib(cfg.device_memory_bytes)} is {_gib(bound)}: "
                f"weights {_gib(beside['weights'])} + activations {_gib(beside['activations'])} + workspace "
                f"{_gib(beside['workspace'])} + CUDA context {_gib(beside.get('cuda_context', 0))} leave no room "
                f"for the cache pool")
    num_blocks = pool_budget // bytes_per_block
    if cfg.num_gpu_blocks_override is not None:
        if cfg.num_gpu_blocks_override > num_blocks:
            raise MemoryRefusal(f"num_gpu_blocks_override: {cfg.num_gpu_blocks_override} blocks of {bytes_per_block} bytes "
                                f"exceed the bound ({num_blocks} blocks fit in {pool_budget} bytes)")
        num_blocks = cfg.num_gpu_blocks_override
    layout = build_layout(num_blocks, groups, group_size)
    per_seq = per_sequence_cost(cfg, layout)
    usable = num_blocks - NUM_NULL_BLOCKS
    if usable < per_seq.num_blocks:
        raise MemoryRefusal(
            f"to serve one request of max_model_len {cfg.max_model_len} the pool needs {per_seq.num_blocks} blocks "
            f"({_gib(per_seq.total_bytes)}: attention KV {_gib(per_seq.attention_kv_bytes)}, draft KV "
            f"{_gib(per_seq.draft_kv_bytes)}, {per_seq.state_slots} state slots {_gib(per_seq.recurrent_state_bytes)}), "
            f"but the bound gives it {max(usable, 0)} usable blocks of {bytes_per_block} bytes ({_gib(pool_budget)})")
    # Phase 3: the ledger (the pool's bytes by category, then what lives beside it).
    pool_shares = pool_ledger(cfg, layout)
    ledger = Ledger(bound_bytes=bound, bound_kind=kind, categories={**pool_shares, **beside}, outside_bound=())
    ledger.check()
    max_concurrency = num_blocks / per_seq.num_blocks
    seats = usable // per_seq.num_blocks
    message = None
    if seats < cfg.max_num_seqs:
        message = (f"the pool seats {seats} full-length sequences (max_num_seqs {cfg.max_num_seqs}): each needs "
                   f"{per_seq.num_blocks} blocks of {bytes_per_block} bytes ({_gib(per_seq.total_bytes)}) and the bound "
                   f"gives {usable} usable blocks ({_gib(layout.total_bytes)} of {_gib(bound)}; "
                   f"max_concurrency {max_concurrency:.2f} is num_blocks / blocks per sequence, as vLLM reports it, "
                   f"and counts the reserved null block)")
    return MemoryPlan(layout=layout, ledger=ledger, per_sequence=per_seq, max_concurrency=max_concurrency,
                      num_seats=seats, seat_message=message)
