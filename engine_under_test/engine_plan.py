"""Plan mode of the engine: budgets, memory plan and pool, and a scheduler simulation.

Contract: `build_plan(cfg)` -> `EnginePlan` (budget, memory plan, an unallocated
`UnifiedPool`, the shapes) or raises `BudgetRefusal` / `MemoryRefusal` with the engine's
message. `make_scheduler(plan)` returns a fresh `Scheduler` on the plan's pool layout.
`simulate(plan, requests, acceptance, draft_seed)` drives the scheduler the way the runtime
does (schedule -> sampled tokens -> update_from_output -> update_draft_token_ids) with the
acceptance model standing in for the verifier, and returns one `StepRecord` per step.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

from engine_under_test.acceptance import AcceptanceModel
from engine_under_test.budget import Budget, BudgetRefusal, check_model_limits, resolve_budget
from engine_under_test.config import EngineConfig
from engine_under_test.memory.planner import MemoryPlan, plan_memory, state_slots_per_sequence
from engine_under_test.pool import UnifiedPool
from engine_under_test.scheduler import Request, Scheduler
from engine_under_test.shapes import DraftShape, TargetShape, read_draft_shape, read_target_shape


@dataclass(frozen=True)
class EnginePlan:
    cfg: EngineConfig
    target: TargetShape
    draft: DraftShape | None
    budget: Budget
    memory: MemoryPlan
    pool: UnifiedPool


@dataclass(frozen=True)
class StepRecord:
    total_num_scheduled_tokens: int
    num_scheduled_requests: int
    num_spec_tokens: int
    num_preempted: int
    num_new_requests: int
    num_prefill_chunks: int
    num_sampling_requests: int
    num_accepted_tokens: int
    num_running: int
    num_waiting: int


def build_plan(cfg: EngineConfig) -> EnginePlan:
    target = read_target_shape(cfg.model)
    spec = cfg.speculative_config
    draft = read_draft_shape(spec.model) if spec is not None and spec.model is not None else None
    check_model_limits(cfg, target, draft)
    budget = resolve_budget(cfg)
    memory = plan_memory(cfg, target, draft)
    check_align_chunks(cfg, budget, memory.layout.block_size_tokens)
    return EnginePlan(cfg=cfg, target=target, draft=draft, budget=budget, memory=memory, pool=UnifiedPool(memory.layout))


def check_align_chunks(cfg: EngineConfig, budget: Budget, block_size_tokens: int) -> None:
    """Refuse what align mode could never schedule: with prefix caching on, a prompt chunk that is not a
    prompt's last ends on a block boundary whenever a block fits the step budget (the scheduler's
    `_align_split`; a block past max_num_scheduled_tokens leaves chunks unaligned). A step whose room for
    one request (max_num_batched_tokens less its drafting slots) is under one block, while the block fits
    the step budget, would round every such chunk to 0 and never schedule a long prompt."""
    room = budget.max_num_batched_tokens - budget.drafting_slots_per_request
    if (cfg.mamba_cache_mode == "align" and room < block_size_tokens <= budget.max_num_scheduled_tokens
            and block_size_tokens < cfg.max_model_len):
        raise BudgetRefusal(
            f"max_num_batched_tokens ({budget.max_num_batched_tokens}) less the {budget.drafting_slots_per_request} "
            f"drafting slots per request leaves {room} tokens a step, under one {block_size_tokens}-token block: with "
            f"prefix caching on (align mode) a prompt chunk ends on a block boundary, so a prompt longer than {room} "
            f"tokens could never be scheduled; raise max_num_batched_tokens to at least "
            f"{block_size_tokens + budget.drafting_slots_per_request} or turn prefix caching off")


def make_scheduler(plan: EnginePlan) -> Scheduler:
    align = plan.cfg.mamba_cache_mode == "align"
    checkpoints = align and plan.cfg.gdn_prefill_checkpoints
    # NOTE: the prefill checkpoint block is not one of the align table's 2 + k resident slots: the
    # table adds it for the chunk that writes a checkpoint (vLLM MambaManager).
    return Scheduler(plan.budget, plan.memory.layout, plan.cfg.max_model_len,
                     state_slots_per_sequence(plan.cfg) - int(checkpoints), align_mode=align,
                     enable_chunked_prefill=plan.cfg.enable_chunked_prefill,
                     async_scheduling=plan.cfg.async_scheduling, prefill_checkpoints=checkpoints)


# Batches in flight under async scheduling: the one executing and the one just scheduled (vLLM's
# max_concurrent_batches without pipeline parallelism).
ASYNC_BATCH_QUEUE_SIZE = 2


def simulate(plan: EnginePlan, requests: list[Request], acceptance: AcceptanceModel, token_seed: int,
             max_steps: int | None = None, check_integrity: bool = False) -> list[StepRecord]:
    sched = make_scheduler(plan)
    for r in requests:
        sched.add_request(r)
    k = plan.cfg.num_speculative_tokens
    vocab = plan.target.vocab_size
    rng = random.Random(token_seed)
    bound = max_steps or 4 * sum(r.num_prompt_tokens + r.max_tokens + 1 for r in requests) + 64
    steps: list[StepRecord] = []
    in_flight: deque = deque()   # async: (output, sampled) of batches scheduled, oldest on the right

    def schedule_one() -> tuple:
        if len(steps) >= bound:
            raise RuntimeError(f"scheduler made no progress within {bound} steps "
                               f"({len(sched.running)} running, {len(sched.waiting)} waiting)")
        out = sched.schedule()
        sampled: dict[str, list[int]] = {}
        num_prefill = num_sampling = num_accepted = 0
        for sr in out.scheduled:
            if sr.is_prefill_chunk:
                num_prefill += 1
                continue
            n = acceptance.accepted(len(sr.spec_token_ids)) if sr.spec_token_ids else 0
            num_accepted += n
            num_sampling += 1
            sampled[sr.req_id] = [rng.randrange(2, vocab) for _ in range(1 + n)]
        steps.append(StepRecord(
            total_num_scheduled_tokens=out.total_num_scheduled_tokens, num_scheduled_requests=len(out.scheduled),
            num_spec_tokens=out.num_spec_tokens, num_preempted=len(out.preempted_req_ids),
            num_new_requests=sum(1 for s in out.scheduled if s.is_new), num_prefill_chunks=num_prefill,
            num_sampling_requests=num_sampling, num_accepted_tokens=num_accepted,
            num_running=len(sched.running), num_waiting=len(sched.waiting)))
        return out, sampled

    if plan.cfg.async_scheduling:
        # The engine loop of an async engine: fill the batch queue first, then take the oldest output.
        while sched.has_requests() or in_flight:
            if sched.has_requests():
                out, sampled = schedule_one()
                in_flight.appendleft((out, sampled))
                if len(in_flight) < ASYNC_BATCH_QUEUE_SIZE and (out.total_num_scheduled_tokens > 0
                                                                 or sched.has_requests()):
                    continue
            out, sampled = in_flight.pop()
            sched.update_from_output(out, sampled)
            if check_integrity:
                sched.check_integrity()
        return steps
    while sched.has_requests():
        out, sampled = schedule_one()
        sched.update_from_output(out, sampled)
        if k and out.total_num_scheduled_tokens > 0:
            live = {s.req_id for s in out.scheduled if s.req_id in sched.requests
                    and not sched.requests[s.req_id].status.is_finished and not sched.requests[s.req_id].is_prefill_chunk}
            sched.update_draft_token_ids({rid: [rng.randrange(2, vocab) for _ in range(k)] for rid in sorted(live, key=_order(out))})
        if check_integrity:
            sched.check_integrity()
    return steps


def _order(out):
    index = {s.req_id: i for i, s in enumerate(out.scheduled)}
    return lambda rid: index[rid]
