"""SGLang 0.5.23's admission and decode bookkeeping driven through a case's workload: the per-step trace.

Contract: `run_trace(server_args, sizing, case)` builds SGLang's pools at the sizes SGLang derived
(KVCacheConfigurator._init_pools on the CPU, its storage on torch's meta device, see `meta_storage`:
the KV, mamba state and verify-scratch tensors have their real shapes and no bytes, the index
bookkeeping is real CPU tensors; the target worker's pools: a draft worker's KV pool is indexed by the
target's allocator (DFlashWorkerV2.alloc_memory_pool), so the scheduler's bookkeeping is the target's
and the draft pool is not built, its bytes are in memory.ledger_bytes.draft_kv), the real tree cache
(CacheInitParams as kv_cache_builder.build_kv_cache fills it: radix cache, mamba extra buffer, EAGLE
bigram keys) and
`Req`s (num_requests prompts of prompt_tokens seeded ids, max_new_tokens = output_tokens,
ignore_eos), and loops the way `Scheduler.event_loop_overlap` (or `event_loop_normal` when overlap is
off) orders a step:

    get_next_batch_to_run: merge the last prefill batch into the running batch, filter finished,
        prefill first (PrefillAdder: add_chunked_req, add_one_req over the waiting queue, then
        ScheduleBatch.init_new + prepare_for_extend), else decode (update_running_batch:
        check_decode_mem, retract_decode when it fails, prepare_for_decode -> spec_prepare_for_decode:
        DFLASH's DFlashDraftInputV2.prepare_for_decode, or eagle_prepare_for_decode for EAGLE3 /
        NEXTN / STANDALONE / NGRAM, the page-aligned KV over-allocation of get_alloc_reserve_per_decode)
    run: a stand-in forward (no model, `sglang_results`): a prefill samples one token per request, a
        verify accepts the acceptance model's drafts + 1 bonus; either leaves a fresh draft input on
        the batch (run_batch's batch.spec_info = next_draft_input); queued with batch.copy() as the
        Scheduler queues it
    process the result (under overlap: the previous step's, after the next step is scheduled) with
        SGLang's SchedulerBatchResultProcessor: process_batch_result_prefill (first token,
        checkpoint_kv_cache / release_kv_cache) and process_batch_result_decode
        (_resolve_spec_v2_tokens: kv_committed_len += accepted + 1; update_finish_state;
        _handle_finish_state_updated_req: the mamba ping-pong track-slot swap of
        _mamba_prefix_cache_update, release_kv_cache on finish, which frees the over-allocation)

Each step (SGLang's words where it has them): `phase` "prefill" | "decode";
`total_num_scheduled_tokens` (prefill: extend_num_tokens; decode: running_bs x
speculative_num_draft_tokens, the verify block); `num_spec_tokens` (decode: running_bs x
(num_draft_tokens - 1), the draft tokens scheduled for verification, vLLM's meaning; prefill 0);
`num_scheduled_requests`; `num_preempted` (requests retract_decode sent back to the queue);
`num_accepted_tokens` (drafts the step's result commits, for requests not already finished or
retracted when it is processed); `num_running`, `num_waiting` (after scheduling). Raises
`TraceError` past its step bound. The pools' counters after the loop come back as the end state, and
the storage ledger (`StorageLedger.as_provenance`: bytes left unmaterialised on meta, bytes
materialised) as the pools' record.
"""

from __future__ import annotations

import contextlib
import random
from array import array
from typing import Any, Iterator

from conformance.adapters.sglang import acceptance as sglang_acceptance, results as sglang_results
from conformance.adapters.sglang.acceptance import Acceptance
from conformance.adapters.sglang.loop import Loop, TraceError
from conformance.adapters.sglang.meta_storage import storage_on_meta

FUNCTIONS = (
    "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator._derive_pool_sizes",
    "KVCacheConfigurator._init_pools",
    "sglang.srt.mem_cache.registry.create_tree_cache",
    "sglang.srt.managers.schedule_batch.Req",
    "sglang.srt.managers.schedule_policy.SchedulePolicy.calc_priority",
    "sglang.srt.managers.schedule_policy.PrefillAdder.add_chunked_req",
    "sglang.srt.managers.schedule_policy.PrefillAdder.add_one_req",
    "sglang.srt.managers.schedule_batch.ScheduleBatch.init_new",
    "ScheduleBatch.prepare_for_extend",
    "ScheduleBatch.filter_batch",
    "ScheduleBatch.merge_batch",
    "ScheduleBatch.check_decode_mem",
    "ScheduleBatch.retract_decode",
    "ScheduleBatch.prepare_for_decode",
    "sglang.srt.speculative.spec_utils.spec_prepare_for_decode",
    "sglang.srt.speculative.dflash_info_v2.DFlashDraftInputV2.prepare_for_decode",
    "sglang.srt.speculative.eagle_utils.eagle_prepare_for_decode",
    "sglang.srt.managers.scheduler_components.new_token_ratio_tracker.NewTokenRatioTracker",
    "sglang.srt.managers.schedule_batch.Req.update_finish_state",
    "sglang.srt.mem_cache.common.checkpoint_kv_cache",
    "sglang.srt.mem_cache.common.release_kv_cache",
    *sglang_results.FUNCTIONS,
    *sglang_acceptance.FUNCTIONS,
)

GLUE = (
    {"name": "conformance.adapters.sglang.trace.run_trace",
     "description": "the scheduler loop: mirrors Scheduler.get_next_batch_to_run / _get_new_batch_prefill_raw / "
                    "update_running_batch and event_loop_overlap's order (event_loop_normal's when overlap is off): "
                    "queue (batch.copy(), result), then hand it to SGLang's own result processor; calls "
                    "SGLang's own pieces listed in functions; "
                    "left out: grammar, LoRA, hicache, priority preemption, mixed chunk, DP attention, PP, "
                    "metrics; get_num_allocatable_reqs is recomputed (min of pp_max_micro_batch_size - "
                    "running_bs and free req_to_token rows); truncation_align_size None"},
    *sglang_results.GLUE,
    sglang_acceptance.GLUE,
    {"name": "conformance.adapters.sglang.trace._build (CacheInitParams)",
     "description": "the tree cache's CacheInitParams filled as kv_cache_builder.build_kv_cache fills them from the "
                    "published config (radix cache on/off, eviction policy, session radix cache, mamba extra buffer "
                    "and its lazy mode, is_eagle, chunked_prefill_size); TP/PP/CP groups, metrics, KV events, "
                    "hicache, SWA and MTP draft pools left at their single-GPU defaults"},
    {"name": "conformance.adapters.sglang.meta_storage.storage_on_meta",
     "description": "KVCacheConfigurator._init_pools runs under a torch function mode that creates every "
                    "floating-point fill tensor (torch.zeros / empty / ones / full / empty_strided, Tensor.new_*: "
                    "KV buffers, mamba conv / temporal state, speculative-verify scratch) on torch's meta device: "
                    "SGLang's pool classes build pools of the sizes SGLang derived with no storage; integer "
                    "bookkeeping (req_to_token, allocator free lists, mamba indices) and data-built tensors are "
                    "created on the CPU as SGLang asks (bytes of each in provenance.trace_pools)"},
)


OVERRIDES = (
    {"name": "sglang.srt.mem_cache.memory_pool.MHATokenToKVPool._init_kv_copy_and_warmup",
     "value": "skipped", "reason": "a CUDA KV-copy warmup kernel run when a pool is built; it allocates nothing "
                                   "the allocator hands out (the trace's pool storage is on meta, its "
                                   "bookkeeping on the CPU)"},
    {"name": "sglang.srt.mem_cache.allocation.assign_req_to_token_pool_func",
     "value": "conformance.adapters.sglang.trace._assign_req_to_token_cpu",
     "reason": "the Triton kernel that writes a decode reservation's slots into req_to_token has no CPU path "
               "without sgl_kernel's CPU build; the stand-in writes the same rows with torch"},
    {"name": "sglang.srt.mem_cache.allocation.get_last_loc_triton",
     "value": "sglang.srt.mem_cache.allocation.get_last_loc_torch",
     "reason": "get_last_loc dispatches to a Triton kernel (Triton has no CPU driver) on the paged allocators "
               "a page_size > 1 backend resolves (e.g. SM100); SGLang's own torch implementation computes the same "
               "last slot per request"},
)


def _assign_req_to_token_cpu(req_pool_indices: Any, req_to_token: Any, start_offset: Any, end_offset: Any,
                             out_cache_loc: Any, batch_size: int) -> None:
    """req_to_token[row_i, start_i:end_i] = the next end_i - start_i slots of out_cache_loc (the kernel's rule)."""
    pos = 0
    for i in range(batch_size):
        row, start, end = int(req_pool_indices[i]), int(start_offset[i]), int(end_offset[i])
        req_to_token[row, start:end] = out_cache_loc[pos:pos + end - start].to(req_to_token.dtype)
        pos += end - start


@contextlib.contextmanager
def _cpu_stand_ins() -> Iterator[None]:
    from sglang.srt.mem_cache import allocation
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    saved_warmup = MHATokenToKVPool._init_kv_copy_and_warmup
    saved_assign = allocation.assign_req_to_token_pool_func
    saved_last_loc = allocation.get_last_loc_triton
    MHATokenToKVPool._init_kv_copy_and_warmup = lambda self: None
    allocation.assign_req_to_token_pool_func = _assign_req_to_token_cpu
    allocation.get_last_loc_triton = allocation.get_last_loc_torch
    try:
        yield
    finally:
        MHATokenToKVPool._init_kv_copy_and_warmup = saved_warmup
        allocation.assign_req_to_token_pool_func = saved_assign
        allocation.get_last_loc_triton = saved_last_loc


def _build(server_args: Any, sizing: Any) -> tuple[Any, Any, dict[str, Any]]:
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.registry import TreeCacheBuildContext, create_tree_cache
    from sglang.srt.runtime_context import get_exec, get_memory, get_schedule, get_spec
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    kvc = sizing.kvc
    kvc.device = "cpu"
    with storage_on_meta() as ledger:
        pools = kvc._init_pools(sizes=kvc._derive_pool_sizes(config=sizing.pool_config), req_to_token_pool=None,
                                token_to_kv_pool_allocator=None)
    disable = get_memory().disable_radix_cache
    # The fields kv_cache_builder.build_tree_cache sets from the published config (no TP/PP groups,
    # metrics, KV events, hicache, SWA or MTP draft pools in the trace).
    params = CacheInitParams(disable=disable, req_to_token_pool=pools.req_to_token_pool,
                             token_to_kv_pool_allocator=pools.token_to_kv_pool_allocator,
                             page_size=get_schedule().page_size,
                             is_eagle=SpeculativeAlgorithm.from_string(get_spec().speculative_algorithm).is_eagle(),
                             eviction_policy=get_memory().radix_eviction_policy,
                             eviction_policy_config=get_memory().radix_eviction_policy_config,
                             enable_session_radix_cache=get_memory().enable_session_radix_cache,
                             enable_mamba_extra_buffer=get_exec().mamba.enable_mamba_extra_buffer,
                             enable_mamba_extra_buffer_lazy=get_exec().mamba.enable_mamba_extra_buffer_lazy,
                             chunked_prefill_size=get_schedule().chunked_prefill_size)
    tree_cache = create_tree_cache(TreeCacheBuildContext(
        server_args=server_args, params=params, is_hybrid_swa=False, is_hybrid_ssm=sizing.is_hybrid,
        enable_hierarchical_cache=False, disable_radix_cache=disable, tp_worker=None,
        model_config=kvc.model_config, tp_size=1, tp_rank=0, tp_group=None))
    return pools, tree_cache, ledger.as_provenance()


def _requests(case: dict[str, Any], vocab: int) -> list[Any]:
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    wl = case["workload"]
    rng = random.Random(wl["seed"])
    out = []
    for i in range(wl["num_requests"]):
        ids = array("q", [rng.randrange(2, vocab) for _ in range(wl["prompt_tokens"])])
        params = SamplingParams(max_new_tokens=wl["output_tokens"], ignore_eos=True, temperature=0.0)
        params.normalize(None)
        params.verify(vocab)
        out.append(Req(f"req-{i}", "", ids, params, vocab_size=vocab))
    return out


def run_trace(server_args: Any, sizing: Any,
              case: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, int]]:
    """The steps, the pools' storage ledger and the pools' end state (`Loop.end_state`); `TraceError` past
    the bound, ValueError for a mode with no trace."""
    from sglang.srt.runtime_context import get_spec

    acceptance = Acceptance(case)
    num_draft_tokens = int(get_spec().speculative_num_draft_tokens or 1)
    wl = case["workload"]
    max_steps = 4 * (wl["num_requests"] * (wl["prompt_tokens"] + wl["output_tokens"]) + wl["num_requests"]) + 64
    with _cpu_stand_ins():
        pools, tree_cache, storage = _build(server_args, sizing)
        vocab = int(sizing.kvc.model_config.vocab_size)
        loop = Loop(server_args, sizing, pools, tree_cache, acceptance, num_draft_tokens,
                    random.Random(wl["seed"] + 2), vocab)
        loop.waiting = _requests(case, vocab)
        steps = loop.run(max_steps)
        return steps, storage, loop.end_state()
