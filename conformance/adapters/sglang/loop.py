"""The scheduler loop of the SGLang 0.5.23 plan trace (see `sglang_trace` for the contract).

`Loop.run(max_steps)` mirrors `Scheduler.event_loop_overlap` (or `event_loop_normal`):

    batch = next_batch()            # get_next_batch_to_run
    if batch: queue (batch.copy(), the stand-in forward's result)
    process the previous result     # overlap: after scheduling; normal: right away

Every memory decision is SGLang's: PrefillAdder's budgets, check_decode_mem, retract_decode,
prepare_for_extend / prepare_for_decode allocating from the real allocator, and SGLang's
SchedulerBatchResultProcessor committing tokens, swapping mamba track slots and freeing through
release_kv_cache. The loop ends when nothing is waiting, running or in flight.
"""

from __future__ import annotations

from collections import deque
from typing import Any


class TraceError(RuntimeError):
    """The loop passed its step bound, or SGLang scheduled nothing with work waiting."""


class Loop:
    def __init__(self, server_args: Any, sizing: Any, pools: Any, tree_cache: Any, acceptance: Any,
                 num_draft_tokens: int, token_rng: Any, vocab: int):
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.managers.schedule_policy import SchedulePolicy
        from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import NewTokenRatioTracker
        from sglang.srt.runtime_context import get_schedule, get_spec
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        sched = get_schedule()
        self.sizing, self.pools, self.tree_cache = sizing, pools, tree_cache
        self.req_to_token_pool = pools.req_to_token_pool
        self.allocator = pools.token_to_kv_pool_allocator
        self.acceptance, self.num_draft_tokens, self.token_rng, self.vocab = (
            acceptance, num_draft_tokens, token_rng, vocab)
        self.page_size = int(sched.page_size)
        chunked = sched.chunked_prefill_size
        self.chunked_prefill_size = chunked if chunked is not None and chunked > 0 else None
        self.max_prefill_tokens = int(sched.max_prefill_tokens)
        self.max_running_requests = int(sizing.max_running_requests)
        self.prefill_max_requests = sched.prefill_max_requests
        self.enable_overlap = not sched.disable_overlap_schedule
        self.spec_algorithm = SpeculativeAlgorithm.from_string(get_spec().speculative_algorithm)
        from sglang.srt.managers.min_free_slots_delayer import MinFreeSlotsDelayer, resolve_min_free_slots
        from sglang.srt.runtime_context import get_parallel

        min_free = resolve_min_free_slots(sched.min_free_slots_delay, self.max_running_requests,
                                          is_dflash_family=self.spec_algorithm.is_dflash_family())
        self.min_free_slots_delayer = MinFreeSlotsDelayer(min_free_slots=min_free) if min_free is not None else None
        # Scheduler.__init__'s default when unset: max_running_requests // pp_size.
        self.pp_max_micro_batch_size = int(get_parallel().pp_max_micro_batch_size
                                           or max(self.max_running_requests // get_parallel().pp_size, 1))
        self.policy = SchedulePolicy(sched.schedule_policy, tree_cache, False, sched.enable_priority_scheduling,
                                     sched.schedule_low_priority_values_first)
        self.ratio = NewTokenRatioTracker.from_config()
        self.running = ScheduleBatch(reqs=[], batch_is_full=False)
        self.waiting: list[Any] = []
        self.chunked_req = None
        self.last_batch = None
        self.queue: deque = deque()
        self.steps: list[dict[str, Any]] = []
        from conformance.adapters.sglang.results import build_processor

        self.processor = build_processor(self)

    # ---- get_next_batch_to_run ------------------------------------------------------------
    def next_batch(self) -> tuple[Any, int]:
        """(batch to run or None, number retracted this step)."""
        exclude = []
        if self.chunked_req is not None:
            exclude.append(self.chunked_req)
            if self.chunked_req.extend_end > self.chunked_req.prefix_len:
                from sglang.srt.mem_cache.common import checkpoint_kv_cache

                checkpoint_kv_cache(self.chunked_req, self.tree_cache)  # stash_chunked_request
        last = self.last_batch
        if last is not None and last.forward_mode.is_extend():
            if last.chunked_req is not None:
                exclude.append(last.chunked_req)
            last_bs = last.batch_size()
            last.filter_batch(reqs_to_exclude=exclude)
            if last.batch_size() < last_bs:
                self.running.batch_is_full = False
            if not last.is_empty() and last is not self.running:
                if self.running.is_empty():
                    self.running = last
                else:
                    self.running.merge_batch(last)
        running_bs = self.running.batch_size()
        self.running.filter_batch()
        if self.running.batch_size() < running_bs:
            self.running.batch_is_full = False
        new_batch = self.prefill()
        if new_batch is not None:
            return new_batch, 0
        if not self.running.is_empty():
            return self.update_running_batch()
        return None, 0

    def allocatable(self, running_bs: int, held_rows: int = 0) -> int:
        return min(self.pp_max_micro_batch_size - running_bs,
                   max(self.req_to_token_pool.available_size() + held_rows, 0))

    # ---- _get_new_batch_prefill_raw ---------------------------------------------------------
    def prefill(self) -> Any:
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder

        running = self.running
        if running.is_empty():
            running.batch_is_full = False
        if (running.batch_is_full or not self.waiting) and self.chunked_req is None:
            return None
        running_bs = len(running.reqs)
        if (self.min_free_slots_delayer is not None and self.chunked_req is None
                and self.min_free_slots_delayer.should_delay(running_bs=running_bs,
                                                             num_allocatable_reqs=self.allocatable(running_bs))):
            return None
        if self.allocatable(running_bs) <= 0 and self.chunked_req is None:
            running.batch_is_full = True
            return None
        self.policy.calc_priority(self.waiting, running, processed_tokens=0)
        adder = PrefillAdder(self.page_size, self.tree_cache, self.allocator, running, self.ratio.current,
                             self.max_prefill_tokens, self.chunked_prefill_size, 0, 0, max_prefill_bs=0,
                             max_running_requests=self.max_running_requests,
                             prefill_max_requests=self.prefill_max_requests, waiting_queue_len=len(self.waiting))
        if self.chunked_req is not None:
            self.chunked_req.init_next_round_input()
            adder.chunked_req_limit = self.policy.shortest_prefill_chunk_limit(
                self.chunked_req, self.waiting, adder.rem_chunk_tokens or 0, self.page_size)
            self.chunked_req = adder.add_chunked_req(self.chunked_req)
        mamba_allocator = getattr(self.req_to_token_pool, "mamba_allocator", None)
        if mamba_allocator is not None:
            mamba_allocator.alloc_group_begin(len(self.waiting))
        for req in self.waiting:
            if adder.budget_state() == AddReqResult.OTHER:
                break
            held = sum(r.kv.holds_kv for r in adder.can_run_list)
            if len(adder.can_run_list) >= self.allocatable(len(running.reqs), held):
                running.batch_is_full = True
            if running.batch_is_full:
                break
            req.init_next_round_input(self.tree_cache)
            res = adder.add_one_req(req, has_chunked_req=self.chunked_req is not None, truncation_align_size=None)
            if res != AddReqResult.CONTINUE:
                if res == AddReqResult.NO_TOKEN:
                    running.batch_is_full = len(adder.can_run_list) > 0 or not running.is_empty()
                added = bool(adder.can_run_list) and req is adder.can_run_list[-1]
                if not added:
                    req.kv.mamba_cow_src_index = None
                    req.kv.mamba_needs_clear = False
                    if req.kv.holds_mamba:
                        self.req_to_token_pool.mamba_allocator.free(req.kv.mamba_pool_idx.unsqueeze(-1))
                        req.kv.mamba_pool_idx = None
                break
        if mamba_allocator is not None:
            mamba_allocator.alloc_group_end()
        can_run = adder.can_run_list
        if not can_run:
            return None
        chosen = set(can_run)
        self.waiting = [r for r in self.waiting if r not in chosen]
        if adder.new_chunked_req is not None:
            self.chunked_req = adder.new_chunked_req
        if self.chunked_req is not None:
            self.chunked_req.inflight_middle_chunks += 1
        batch = ScheduleBatch.init_new(can_run, self.req_to_token_pool, self.allocator, self.tree_cache,
                                       self.sizing.kvc.model_config, self.enable_overlap, self.spec_algorithm,
                                       chunked_req=self.chunked_req)
        batch.prepare_for_extend()
        batch.decoding_reqs = None
        return batch

    # ---- update_running_batch ---------------------------------------------------------------
    def update_running_batch(self) -> tuple[Any, int]:
        batch = self.running
        initial_bs = batch.batch_size()
        finishing = []
        if self.enable_overlap and self.queue:  # _reqs_finishing_inflight (enable_skip_finishing_decode)
            queued = set(self.queue[0][0].reqs)
            finishing = [r for r in batch.reqs if r in queued and r.next_output_finishes_by_length()]
        batch.filter_batch(reqs_to_exclude=finishing)
        if batch.is_empty():
            batch.batch_is_full = False
            return None, 0
        fits = batch.check_decode_mem()
        if not fits and finishing:
            batch.batch_is_full = False
            return None, 0
        num_retracted = 0
        if not fits:
            retracted, new_ratio, aborted = batch.retract_decode()
            if aborted:
                raise RuntimeError(f"SGLang aborted {len(aborted)} request(s) under decode memory pressure: "
                                   f"{aborted[0].to_finish}")
            self.ratio.current = new_ratio
            self.waiting.extend(retracted)  # _add_request_to_queue(req, is_retracted=True)
            num_retracted = len(retracted)
        else:
            self.ratio.decay_step()
        if batch.batch_size() < initial_bs:
            batch.batch_is_full = False
        if batch.is_empty():
            return None, num_retracted
        batch.prepare_for_decode()
        return batch, num_retracted

    # ---- run + result processing --------------------------------------------------------------
    def launch(self, batch: Any, step_index: int) -> None:
        """The stand-in forward: its result, and the batch copy the overlap Scheduler queues with it."""
        from conformance.adapters.sglang import results as sglang_results

        bs = batch.batch_size()
        if batch.forward_mode.is_extend():
            result = sglang_results.prefill_result(bs, self.token_rng, self.vocab)
        else:
            accepted = self.acceptance.accepted_per_request(bs, self.num_draft_tokens - 1)
            result = sglang_results.verify_result(accepted, self.num_draft_tokens, self.token_rng, self.vocab)
        if not self.spec_algorithm.is_none():
            # run_batch: `batch.spec_info = batch_result.next_draft_input` after every spec forward, prefill
            # or verify, so the running batch never carries the draft input prepare_for_decode filled.
            batch.spec_info = sglang_results.next_draft_input(self.spec_algorithm, bs, batch.seq_lens,
                                                              self.num_draft_tokens)
        self.queue.append((batch.copy(), result, step_index))

    def process(self) -> None:
        """SGLang's processor on the oldest queued result; the drafts it commits go on that step."""
        batch, result, step_index = self.queue.popleft()
        if batch.forward_mode.is_extend():
            self.processor.process_batch_result_prefill(batch, result)
            return
        live = [not (r.finished() or r.is_retracted) for r in batch.reqs]
        self.processor.process_batch_result_decode(batch, result)
        self.steps[step_index]["num_accepted_tokens"] += sum(
            n for n, is_live in zip(result.num_correct_drafts_per_req_cpu, live) if is_live)

    def run(self, max_steps: int) -> list[dict[str, Any]]:
        from sglang.srt.environ import envs


        consecutive_prefill_sync = bool(envs.SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP.get())
        while self.waiting or not self.running.is_empty() or self.queue or self.chunked_req is not None:
            if len(self.steps) >= max_steps:
                raise TraceError(f"SGLang trace loop passed its bound of {max_steps} steps "
                                 f"({len(self.waiting)} waiting, {self.running.batch_size()} running)")
            batch, num_retracted = self.next_batch()
            if batch is None and not self.queue:
                raise TraceError(f"SGLang scheduled nothing with {len(self.waiting)} waiting and "
                                 f"{self.running.batch_size()} running (no progress)")
            # is_disable_overlap_for_batch: two prefills in a row process the first one first.
            sync_now = (consecutive_prefill_sync and batch is not None and self.last_batch is not None
                        and batch.forward_mode.is_extend() and self.last_batch.forward_mode.is_extend())
            if self.enable_overlap and sync_now and self.queue:
                self.process()
            if batch is not None:
                self.steps.append(self.record(batch, num_retracted))
                self.launch(batch, len(self.steps) - 1)
            if self.queue and (not self.enable_overlap or batch is None or len(self.queue) > 1):
                self.process()
            self.last_batch = batch
        return self.steps

    def end_state(self) -> dict[str, int]:
        """What the pools hold once the loop is done, in SGLang's own counters (the tree cache keeps
        finished requests' prefixes evictable when the radix cache is on; nothing may stay protected)."""
        tree, pool = self.tree_cache, self.req_to_token_pool
        state = {"kv_tokens": int(self.allocator.size), "kv_free_tokens": int(self.allocator.available_size()),
                 "kv_tree_evictable_tokens": int(tree.evictable_size()),
                 "kv_tree_protected_tokens": int(tree.protected_size()),
                 "req_rows": int(pool.size), "req_free_rows": int(pool.available_size())}
        if getattr(pool, "mamba_allocator", None) is not None:
            evictable = getattr(tree, "mamba_evictable_size", None)
            protected = getattr(tree, "mamba_protected_size", None)
            state.update({"mamba_slots": int(pool.mamba_pool.size),
                          "mamba_free_slots": int(pool.mamba_allocator.available_size()),
                          "mamba_tree_evictable_slots": int(evictable()) if evictable else 0,
                          "mamba_tree_protected_slots": int(protected()) if protected else 0})
        return state

    def record(self, batch: Any, num_retracted: int) -> dict[str, Any]:
        prefill = batch.forward_mode.is_extend()
        bs = batch.batch_size()
        return {
            "phase": "prefill" if prefill else "decode",
            "total_num_scheduled_tokens": int(batch.extend_num_tokens) if prefill else bs * self.num_draft_tokens,
            "num_scheduled_requests": bs,
            "num_spec_tokens": 0 if prefill else bs * (self.num_draft_tokens - 1),
            "num_preempted": num_retracted,
            "num_accepted_tokens": 0,
            "num_running": self.running.batch_size() if not prefill else self.running.batch_size() + bs,
            "num_waiting": len(self.waiting),
        }
