"""The observation's `memory` section from a vLLM `KVPlan`.

Every byte figure is read off vLLM's KVCacheConfig and specs (`num_blocks`, the tensors' `size`,
each spec's `page_size_bytes` / `real_page_size_bytes` / `max_memory_usage_bytes`); the one
thing computed here is how the single aliased allocation is attributed to categories (glue,
named in provenance as `ledger attribution`):

    vLLM allocates one buffer of num_blocks x bytes_per_block; every cache group views it from
    byte 0, and a block id belongs to one group at a time. For the ledger, the pool's blocks are
    shared among the groups in proportion to what one max_model_len sequence needs from each
    group (n_g = cdiv(max_memory_usage_bytes, page_size_bytes), as
    get_max_concurrency_for_kv_cache_config counts them), floored; a block of group g holds,
    per layer of g, real_page bytes of the layer's category and (page - real_page) of `padding`,
    and (bytes_per_block - sum of g's pages) of `unused` (groups with fewer layers than the
    widest). Blocks left by the flooring are `unassigned`. The ledger sums to
    num_blocks x bytes_per_block exactly.

On a gpu_memory_utilization case `add_utilization` adds what vLLM's worker charged beside the pool
(conformance.adapters.vllm.utilization): weights, workspace (total_consumed beyond the weights),
activations (the profile run's transient peak) and cuda_graphs (the applied estimate), all inside
the bound (vLLM's requested memory), and cuda_context (the usage at the init snapshot) outside it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from conformance.adapters.vllm.kv import KVPlan

GLUE = (
    {"name": "ledger attribution", "description": "the one aliased allocation (num_blocks x "
     "bytes_per_block) split by category: blocks shared among groups in proportion to one "
     "max_model_len sequence's blocks per group (floored; the rest 'unassigned'), each block's "
     "bytes by layer category, page padding as 'padding', layer slots a narrower group leaves as 'unused'"},
)

CATEGORIES = ("attention_kv", "recurrent_state", "draft_kv")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def memory(plan: KVPlan, vc: Any) -> dict[str, Any]:
    cfg = plan.kv_cache_config
    num_blocks = int(cfg.num_blocks)
    sizes = {int(t.size) for t in cfg.kv_cache_tensors}
    pool_size = max(sizes) if sizes else 0
    bytes_per_block = pool_size // num_blocks if num_blocks else 0
    in_tensors = {name for t in cfg.kv_cache_tensors for name in t.layers}

    # Per group: layers, blocks one full-length sequence needs, page bytes.
    group_rows = []
    for group in cfg.kv_cache_groups:
        names = list(group.layer_names)
        specs = [plan.specs[n] for n in names]
        rep = specs[0]
        blocks_per_seq = _cdiv(rep.max_memory_usage_bytes(vc), rep.page_size_bytes)
        group_rows.append((names, specs, blocks_per_seq))
    total_blocks_per_seq = sum(r[2] for r in group_rows)

    ledger: dict[str, int] = defaultdict(int)
    for cat in CATEGORIES:
        ledger[cat] = 0
    assigned_blocks = 0
    for names, specs, blocks_per_seq in group_rows:
        share = num_blocks * blocks_per_seq // total_blocks_per_seq if total_blocks_per_seq else 0
        assigned_blocks += share
        used = 0
        for name, spec in zip(names, specs):
            ledger[plan.categories[name]] += share * spec.real_page_size_bytes
            ledger["padding"] += share * (spec.page_size_bytes - spec.real_page_size_bytes)
            used += spec.page_size_bytes
        ledger["unused"] += share * (bytes_per_block - used)
    ledger["unassigned"] += (num_blocks - assigned_blocks) * bytes_per_block

    per_seq: dict[str, int] = {cat: 0 for cat in CATEGORIES}
    state_slots = None
    for name, spec in plan.specs.items():
        per_seq[plan.categories[name]] += spec.max_memory_usage_bytes(vc)
        if plan.categories[name] == "recurrent_state":
            state_slots = _cdiv(spec.max_memory_usage_bytes(vc), spec.page_size_bytes)

    page_sizes = sorted({s.page_size_bytes for s in plan.specs.values()})
    block_sizes = sorted({g.kv_cache_spec.block_size for g in cfg.kv_cache_groups
                          if type(g.kv_cache_spec).__name__ != "MambaSpec"})
    unified = bool(cfg.kv_cache_tensors) and len(sizes) == 1 and pool_size == num_blocks * bytes_per_block \
        and not any(t.host_resident for t in cfg.kv_cache_tensors)
    outside = sorted({plan.categories[n] for n in plan.specs if n not in in_tensors})
    return {
        "bound_bytes": plan.available_bytes,
        "ledger_bytes": dict(ledger),
        "outside_bound": outside,
        "per_sequence": {
            "attention_kv_bytes": per_seq["attention_kv"],
            "recurrent_state_bytes": per_seq["recurrent_state"],
            "draft_kv_bytes": per_seq["draft_kv"],
            "state_slots": state_slots,
            "max_model_len_tokens": vc.model_config.max_model_len,
            "blocks_per_sequence": total_blocks_per_seq,
        },
        "pool": {
            "num_blocks": num_blocks,
            "block_size_tokens": block_sizes[0] if len(block_sizes) == 1 else (block_sizes[0] if block_sizes else None),
            "page_size_bytes": page_sizes[0] if len(page_sizes) == 1 else None,
            "unified": unified,
            "bytes_per_block": bytes_per_block,
            "size_bytes": pool_size,
            "num_groups": len(cfg.kv_cache_groups),
            "groups": [
                {"kind": type(specs[0]).__name__, "num_layers": len(names),
                 "categories": sorted({plan.categories[n] for n in names}),
                 "block_size_tokens": specs[0].block_size, "page_size_bytes": specs[0].page_size_bytes,
                 "blocks_per_sequence": blocks_per_seq}
                for names, specs, blocks_per_seq in group_rows
            ],
            "scheduler_num_blocks": int(plan.scheduler_kv_cache_config.num_blocks),
        },
        "max_concurrency": float(plan.max_concurrency),
    }


def add_utilization(memory_section: dict[str, Any], util: Any) -> None:
    """A gpu_memory_utilization case: the bound is vLLM's requested memory; weights, workspace,
    activations and the CUDA graph estimate sit beside the pool inside it; the init usage
    (`cuda_context`) is outside it, as vLLM does not charge it to the requested memory."""
    memory_section["bound_bytes"] = util.requested_bytes
    memory_section["ledger_bytes"].update(util.beside_pool_bytes())
    memory_section["ledger_bytes"]["cuda_context"] = util.init_used_bytes
    memory_section["outside_bound"] = sorted(set(memory_section["outside_bound"]) | {"cuda_context"})
