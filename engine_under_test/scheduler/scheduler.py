"""The scheduler: vLLM v1 semantics over the unified pool.

Core contract:
    out = scheduler.schedule()        # SchedulerOutput: {req_id: num_scheduled_tokens}, spec
                                      # tokens, block tables and state slots per request
    scheduler.update_from_output(out, {req_id: sampled token ids})   # accepted drafts + bonus
    scheduler.update_draft_token_ids({req_id: draft ids})            # drafts for the next step

There is no prefill or decode phase: each request's num_computed_tokens catches up with
num_tokens_with_spec (prompt + output + drafts). A step spends at most max_num_scheduled_tokens
(the token budget) and charges every scheduled request its drafting slots against
max_num_batched_tokens (the input budget), from the pinned oracle's table. RUNNING requests go
first, in order; a request whose blocks (plus lookahead slots) do not fit preempts the last
running request (recompute: its blocks are freed, it goes back to the front of the waiting
queue). WAITING requests are admitted only if nothing was preempted this step, while fewer
than max_active_seqs run, and only if their whole prompt fits in the free blocks (counted as
the KV manager's first allocation counts it, see kv_manager). Chunked prefill
splits a prompt across steps; in align mode (prefix caching on a hybrid model) chunks end at
block boundaries and the last cacheable boundary of the prompt (vLLM's
`_mamba_block_aligned_split`). update_from_output rolls num_computed_tokens back by the
rejected drafts, appends the sampled tokens and finishes requests at max_tokens or
max_model_len.

Async scheduling (`async_scheduling=True`, vLLM's AsyncScheduler): step N+1 is scheduled
before step N's output arrives. A request past its prefill counts 1 + its scheduled drafts as
output placeholders and gets k placeholder drafts, so it is scheduled again at once;
update_from_output resolves the placeholders (rejections roll both counters back). Every
scheduled token counts in num_in_flight_tokens until its step's output is processed, and the KV
manager frees blocks only behind the processed tokens (vLLM's Request.num_in_flight_tokens). A request
whose in-flight output surely reaches max_tokens is not scheduled again. There is no prefix cache: vLLM's hits (across requests, or on a preempted
request's own cached blocks when it comes back) are not modelled.
"""

from __future__ import annotations

from collections import deque

from engine_under_test.budget import Budget
from engine_under_test.memory.specs import cdiv
from engine_under_test.pool import PoolLayout
from engine_under_test.scheduler.kv_manager import KVCacheManager
from engine_under_test.scheduler.output import ScheduledRequest, SchedulerOutput
from engine_under_test.scheduler.request import Request, RequestStatus

NUM_SAMPLED_TOKENS_PER_STEP = 1


def mamba_checkpoint_position(num_tokens: int, block_size: int) -> int:
    """The last block boundary whose state can be cached (one token left for the logits)."""
    return max((num_tokens - 1) // block_size * block_size, 0)


class Scheduler:
    def __init__(self, budget: Budget, layout: PoolLayout, max_model_len: int, num_state_slots: int,
                 align_mode: bool = False, enable_chunked_prefill: bool = True, async_scheduling: bool = False,
                 prefill_checkpoints: bool = False):
        self.budget = budget
        self.layout = layout
        self.max_model_len = max_model_len
        self.align_mode = align_mode and bool(layout.state_group_ids)
        self.enable_chunked_prefill = enable_chunked_prefill
        self.async_scheduling = async_scheduling
        self.prefill_checkpoints = prefill_checkpoints and self.align_mode
        self.kv = KVCacheManager(layout, max_model_len, num_state_slots, align_mode=self.align_mode,
                                 prefill_checkpoints=prefill_checkpoints and self.align_mode)
        self.requests: dict[str, Request] = {}
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.step = 0
        self._finished_since_last: list[str] = []

    # -- requests ---------------------------------------------------------------------------
    def add_request(self, req: Request) -> None:
        if req.request_id in self.requests:
            raise ValueError(f"request {req.request_id!r} already added")
        if req.num_prompt_tokens >= self.max_model_len:
            raise ValueError(f"request {req.request_id}: prompt of {req.num_prompt_tokens} tokens does not fit "
                             f"max_model_len {self.max_model_len} (one token must be left to sample)")
        self.requests[req.request_id] = req
        self.waiting.append(req)

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.running)

    def has_finished_requests(self) -> bool:
        """Finished since the last schedule(): the next output still has to report them."""
        return bool(self._finished_since_last)

    def has_requests(self) -> bool:
        """Whether another schedule() is due (as vLLM: unfinished, or finished not yet reported);
        the last step of a workload is an empty one that reports the final finished ids."""
        return self.has_unfinished_requests() or self.has_finished_requests()

    # -- scheduling -------------------------------------------------------------------------
    def _align_split(self, req: Request, num_new_tokens: int) -> int:
        start = req.num_computed_tokens
        prefill_end = max(req.num_prompt_tokens, req.num_tokens - 1)
        if start >= prefill_end:
            return num_new_tokens
        bs = self.layout.block_size_tokens
        last_cache = mamba_checkpoint_position(req.num_tokens, bs)
        end = start + num_new_tokens
        if self.prefill_checkpoints and end >= prefill_end and self._internal_checkpoint(start, end, prefill_end):
            last_cache = 0   # the kernel writes the checkpoint inside this chunk: no split at it
        if end < prefill_end:
            aligned = end // bs * bs
            if aligned > start or bs <= self.budget.max_num_scheduled_tokens:
                end = aligned
        stops = ((start // bs + 1) * bs if start % bs else 0, last_cache)
        end = min((s for s in stops if start < s < end), default=end)
        return max(end - start, 0)

    def _internal_checkpoint(self, start: int, end: int, prefill_end: int) -> bool:
        """NOTE: vLLM is_mamba_prefill_checkpoint_valid with hash block, state block and checkpoint
        grid all one block: the chunk starts on a block, spans the prompt's last cacheable boundary
        and ends at least one block past the state it started from."""
        bs = self.layout.block_size_tokens
        checkpoint = mamba_checkpoint_position(prefill_end, bs)
        return (start % bs == 0 and cdiv(end, bs) - 2 > (start - 1) // bs and start + bs <= checkpoint
                and start < checkpoint < end and (checkpoint - start) % bs == 0)

    def _preempt(self, req: Request) -> None:
        self.kv.free(req.request_id)
        req.status = RequestStatus.PREEMPTED
        req.num_computed_tokens = 0
        req.spec_token_ids = []
        req.num_output_placeholders = 0
        req.num_preemptions += 1
        self.waiting.appendleft(req)

    def schedule(self) -> SchedulerOutput:
        self.step += 1
        b = self.budget
        k = b.num_speculative_tokens
        token_budget, input_budget, draft_slots = b.max_num_scheduled_tokens, b.max_num_batched_tokens, b.drafting_slots_per_request
        num_scheduled: dict[str, int] = {}
        spec: dict[str, list[int]] = {}
        new_ids: set[str] = set()
        preempted: list[Request] = []
        scheduled_running: list[Request] = []
        prefill_scheduled = False

        # Phase 1: RUNNING requests, in order.
        i = 0
        while i < len(self.running) and token_budget > 0:
            req = self.running[i]
            if input_budget <= draft_slots:
                break
            if (req.num_output_placeholders > 0 and req.num_computed_tokens + 2 - req.num_output_placeholders
                    >= req.num_prompt_tokens + req.max_tokens):
                i += 1   # async: the output in flight surely reaches max_tokens
                continue
            n = req.num_tokens_with_spec + req.num_output_placeholders - req.num_computed_tokens
            n = min(n, token_budget, input_budget - draft_slots)
            n = min(n, self.max_model_len - req.num_computed_tokens - NUM_SAMPLED_TOKENS_PER_STEP)
            if self.align_mode:
                n = self._align_split(req, n)
            if n <= 0:
                i += 1
                continue
            while True:
                if self.kv.allocate_slots(req, n, b.lookahead_tokens) is not None:
                    break
                victim = self.running.pop()
                if victim in scheduled_running:
                    scheduled_running.remove(victim)
                    restored = num_scheduled.pop(victim.request_id)
                    token_budget += restored
                    input_budget += restored + draft_slots
                    spec.pop(victim.request_id, None)
                self._preempt(victim)
                preempted.append(victim)
                if victim is req:
                    break
            if req.status is RequestStatus.PREEMPTED:
                break
            scheduled_running.append(req)
            prefill_scheduled |= req.is_prefill_chunk
            num_scheduled[req.request_id] = n
            token_budget -= n
            input_budget -= n + draft_slots
            i += 1
            if req.spec_token_ids:
                num_spec = n + req.num_computed_tokens - req.num_tokens - req.num_output_placeholders
                if num_spec > 0:
                    spec[req.request_id] = req.spec_token_ids[:num_spec]
                req.spec_token_ids = []

        # Phase 2: WAITING requests, only when nothing was preempted.
        if not preempted:
            while token_budget > 0 and self.waiting and input_budget > draft_slots:
                if len(self.running) >= b.max_active_seqs:
                    break
                req = self.waiting[0]
                request_budget = min(token_budget, input_budget - draft_slots)
                n = req.num_tokens - req.num_computed_tokens
                pad = False
                if (k > 0 and n == 1 and not prefill_scheduled and (scheduled_running or req.num_computed_tokens > 0)
                        and req.num_computed_tokens + 1 + k + NUM_SAMPLED_TOKENS_PER_STEP <= self.max_model_len):
                    if 1 + k > request_budget:
                        break
                    n, pad = 1 + k, True
                if not self.enable_chunked_prefill and n > request_budget:
                    break
                n = min(n, request_budget)
                if self.align_mode:
                    n = self._align_split(req, n)
                    if n == 0:
                        break
                    if pad and n != 1 + k:
                        n, pad = 1, False
                if self.kv.allocate_slots(req, n, b.lookahead_tokens, admission=True) is None:
                    break
                self.waiting.popleft()
                self.running.append(req)
                new_ids.add(req.request_id)
                req.status = RequestStatus.RUNNING
                num_scheduled[req.request_id] = n
                token_budget -= n
                input_budget -= n + draft_slots
                if pad:
                    spec[req.request_id] = [-1] * k

        # Phase 3: the output, then advance num_computed_tokens (rejections roll it back later).
        scheduled: list[ScheduledRequest] = []
        attention_gids, state_gids = self.layout.attention_group_ids, self.layout.state_group_ids
        for req in self.running:
            n = num_scheduled.get(req.request_id)
            if n is None:
                continue
            drafts = spec.get(req.request_id, [])
            start = req.num_computed_tokens
            held = self.kv.blocks_of(req.request_id)             # tuples per group
            after = start + n
            is_chunk = after < req.num_tokens + req.num_output_placeholders
            scheduled.append(ScheduledRequest(
                req_id=req.request_id, num_computed_tokens=start, num_scheduled_tokens=n,
                token_ids=req.token_ids_between(start, after, drafts), spec_token_ids=tuple(drafts),
                block_ids={g: held[g] for g in attention_gids}, state_block_ids={g: held[g] for g in state_gids},
                is_prefill_chunk=is_chunk, is_new=req.request_id in new_ids))
            req.num_computed_tokens = after
            req.num_in_flight_tokens += n
            req.is_prefill_chunk = is_chunk
            if self.async_scheduling and not is_chunk:
                # NOTE: AsyncScheduler._update_after_schedule: the bonus token and the drafts are
                # in flight; k placeholder drafts let the request be scheduled again next step.
                req.num_output_placeholders += NUM_SAMPLED_TOKENS_PER_STEP + len(drafts)
                req.spec_token_ids = [-1] * k
        if sum(num_scheduled.values()) > b.max_num_scheduled_tokens:
            raise RuntimeError("scheduler broke its token budget")  # an engine bug, never user input
        finished, self._finished_since_last = tuple(self._finished_since_last), []
        return SchedulerOutput(step=self.step, scheduled=tuple(scheduled),
                               preempted_req_ids=tuple(r.request_id for r in preempted), finished_req_ids=finished)

    # -- results ----------------------------------------------------------------------------
    def update_from_output(self, output: SchedulerOutput, sampled_token_ids: dict[str, list[int]]) -> list[str]:
        """Apply one step's results; returns the ids of requests that finished."""
        done: list[str] = []
        for sr in output.scheduled:
            req = self.requests.get(sr.req_id)
            if req is None:
                continue
            req.num_in_flight_tokens -= sr.num_scheduled_tokens
            if req.status is RequestStatus.PREEMPTED and req in self.waiting:
                # NOTE: async scheduling: the output of a step scheduled before the preemption is
                # still delivered (vLLM's stale output): its tokens are appended, the reset counters
                # stay as they are.
                self._append_stale(req, list(sampled_token_ids.get(sr.req_id, [])), done)
                continue
            if req.status is not RequestStatus.RUNNING:
                continue
            generated = list(sampled_token_ids.get(sr.req_id, []))
            if sr.spec_token_ids and generated:
                num_accepted = len(generated) - 1
                if num_accepted > len(sr.spec_token_ids):
                    raise ValueError(f"request {sr.req_id}: {len(generated)} sampled tokens for {len(sr.spec_token_ids)} drafts")
                num_rejected = len(sr.spec_token_ids) - num_accepted
                if req.num_computed_tokens > 0:
                    req.num_computed_tokens -= num_rejected
                if req.num_output_placeholders > 0:
                    req.num_output_placeholders -= num_rejected
            for num_new, tok in enumerate(generated, 1):
                if self._append_token(req, tok):
                    req.num_computed_tokens -= len(generated) - num_new
                    break
            if req.num_output_placeholders > 0:
                req.num_output_placeholders -= len(generated)
            if req.status.is_finished:
                self.kv.free(req.request_id)
                self.running.remove(req)
                done.append(req.request_id)
        self._finished_since_last += done
        return done

    def _append_token(self, req: Request, tok: int) -> bool:
        """Append one output token and set the finish status (EOS, max_tokens, max_model_len);
        True when the request finished on it."""
        req.output_token_ids.append(tok)
        if req.eos_token_id is not None and tok == req.eos_token_id:
            req.status = RequestStatus.FINISHED_STOPPED
        elif req.num_output_tokens >= req.max_tokens or req.num_tokens >= self.max_model_len:
            req.status = RequestStatus.FINISHED_LENGTH
        return req.status.is_finished

    def _append_stale(self, req: Request, generated: list[int], done: list[str]) -> None:
        for tok in generated:
            if self._append_token(req, tok):
                self.waiting.remove(req)
                done.append(req.request_id)
                return

    def update_draft_token_ids(self, draft_token_ids: dict[str, list[int]]) -> None:
        for req_id, drafts in draft_token_ids.items():
            req = self.requests.get(req_id)
            if req is None or req.status.is_finished:
                continue
            req.spec_token_ids = [] if req.is_prefill_chunk else list(drafts)

    def check_integrity(self) -> None:
        self.kv.check_integrity()
        ids = [r.request_id for r in self.running] + [r.request_id for r in self.waiting]
        assert len(ids) == len(set(ids)), "a request is both running and waiting"
        assert len(self.running) <= self.budget.max_num_seqs, "more running requests than max_num_seqs"
        for r in self.running:
            assert r.status is RequestStatus.RUNNING
            # between schedule() and update_from_output() the scheduled drafts are counted as computed
            assert r.num_computed_tokens <= (r.num_tokens + r.num_output_placeholders
                                             + self.budget.num_speculative_tokens)
            assert r.num_output_placeholders >= 0
        for r in self.waiting:
            assert not self.kv.holds_blocks(r.request_id), f"waiting request {r.request_id} holds blocks"
        for r in self.running + list(self.waiting):
            assert r.num_in_flight_tokens >= 0, f"request {r.request_id}: negative in-flight tokens"
