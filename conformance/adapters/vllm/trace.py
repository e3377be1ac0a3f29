"""vLLM 0.33's real scheduler driven through a case's workload: the per-step trace.

Contract: `run_trace(vc, sched_kv_cache_config, case)` builds the class
`scheduler_config.get_scheduler_cls()` names with the scheduler KV config (as EngineCore does),
adds `num_requests` requests of `prompt_tokens` seeded token ids, each asking for exactly
`output_tokens` tokens, and loops in sync mode (EngineCore.step + post_step):

    schedule() -> fake ModelRunnerOutput -> update_from_output() -> update_draft_token_ids()

until no request is left. With `scheduler_config.async_scheduling` on (the GPU default: the class
is vLLM's AsyncScheduler) the loop is EngineCore.step_with_batch_queue's instead: a batch queue
of `vllm_config.max_concurrent_batches` entries; each call schedules a new batch while the queue
has room (fulfilling the queue before taking outputs) and otherwise takes the oldest batch's
output, so outputs reach `update_from_output` one step after the next batch was scheduled; no
`update_draft_token_ids` (EngineCore.post_step skips it under async scheduling: AsyncScheduler
schedules -1 placeholders and the worker fills the real draft ids). It returns the steps (vLLM's own field names) and raises
`TraceError` if the loop passes its bound (a scheduler that stops making progress).

Glue (named in provenance): the loop itself; the fake model runner output (a request whose
prefill is still a chunk samples nothing; any other samples 1 + accepted tokens, accepted
drawn from the acceptance model); the drafter stand-in (every request past prefill gets
num_speculative_tokens draft ids each step, the way a model drafter always proposes k);
the seeded token ids (random.Random(workload.seed)); for `synthetic` acceptance, the
Bernoulli draws (random.Random(seed + 1)) against vLLM's own conditional rates
(`unconditional_to_conditional_rates` of speculative_config.synthetic_acceptance_rates).
"""

from __future__ import annotations

import random
from typing import Any

FUNCTIONS = (
    "vllm.config.SchedulerConfig.get_scheduler_cls",
    "vllm.v1.core.sched.scheduler.Scheduler.schedule",
    "vllm.v1.core.sched.scheduler.Scheduler.update_from_output",
    "vllm.v1.core.sched.scheduler.Scheduler.update_draft_token_ids",
    "vllm.v1.core.kv_cache_utils.get_request_block_hasher",
    "vllm.v1.spec_decode.utils.unconditional_to_conditional_rates",
)

GLUE = (
    {"name": "scheduler loop", "description": "sync-mode loop: schedule -> fake ModelRunnerOutput -> "
     "update_from_output -> update_draft_token_ids, as EngineCore.step + post_step; bounded by "
     "max_steps = 4 x (num_requests x (prompt_tokens + output_tokens) + num_requests) + 64"},
    {"name": "fake ModelRunnerOutput", "description": "prefill chunks sample nothing; other scheduled "
     "requests sample 1 + accepted tokens (token ids seeded from workload.seed)"},
    {"name": "drafter stand-in", "description": "after each step every running request past its "
     "prefill receives num_speculative_tokens draft ids (a model drafter always proposes k)"},
)


ASYNC_FUNCTIONS = (
    "vllm.v1.core.sched.async_scheduler.AsyncScheduler._update_after_schedule",
    "vllm.config.VllmConfig.max_concurrent_batches",
)

ASYNC_GLUE = (
    {"name": "scheduler loop", "description": "async-mode loop as EngineCore.step_with_batch_queue: a batch "
     "queue of max_concurrent_batches; schedule while the queue has room and something was scheduled or requests "
     "remain, else pop the oldest batch and update_from_output with its fake ModelRunnerOutput (decided when "
     "it was scheduled); no update_draft_token_ids (post_step skips it under async scheduling); bounded by "
     "max_steps = 4 x (num_requests x (prompt_tokens + output_tokens) + num_requests) + 64"},
    GLUE[1],
    {"name": "drafter stand-in", "description": "AsyncScheduler's own -1 placeholders stand for the drafts "
     "(num_speculative_tokens per request past its prefill), as the worker fills them on the GPU"},
)


def functions(vc: Any) -> tuple[str, ...]:
    return FUNCTIONS + (ASYNC_FUNCTIONS if vc.scheduler_config.async_scheduling else ())


def glue(vc: Any) -> tuple[dict[str, str], ...]:
    return ASYNC_GLUE if vc.scheduler_config.async_scheduling else GLUE


class TraceError(RuntimeError):
    pass


class Acceptance:
    """Accepted drafts per verify step: `fixed` n, or `synthetic` draws against vLLM's rates."""

    def __init__(self, case: dict[str, Any], vc: Any):
        acc = case["acceptance"]
        self.mode = acc["mode"]
        if self.mode == "fixed":
            self.fixed = int(acc["accepted_tokens"])
            self.rates: list[float] = []
        elif self.mode == "synthetic":
            from vllm.v1.spec_decode.utils import unconditional_to_conditional_rates

            self.rates = list(unconditional_to_conditional_rates(vc.speculative_config.synthetic_acceptance_rates))
            self.rng = random.Random(case["workload"]["seed"] + 1)
        else:
            raise ValueError(f"acceptance mode {self.mode!r} has no plan-mode trace")

    def accepted(self, num_drafts: int) -> int:
        if self.mode == "fixed":
            return min(self.fixed, num_drafts)
        n = 0
        while n < num_drafts and self.rng.random() < self.rates[n]:
            n += 1
        return n


def _requests(case: dict[str, Any], vc: Any, block_hasher: Any) -> list[Any]:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    wl = case["workload"]
    vocab = vc.model_config.get_vocab_size()
    rng = random.Random(wl["seed"])
    out = []
    for i in range(wl["num_requests"]):
        prompt = [rng.randrange(2, vocab) for _ in range(wl["prompt_tokens"])]
        params = SamplingParams(max_tokens=wl["output_tokens"], min_tokens=wl["output_tokens"], ignore_eos=True,
                                temperature=0.0)
        out.append(Request(request_id=f"req-{i}", prompt_token_ids=prompt, sampling_params=params,
                           pooling_params=None, arrival_time=float(i), block_hasher=block_hasher))
    return out


def _block_hasher(vc: Any, sched_cfg: Any) -> Any:
    if not vc.cache_config.enable_prefix_caching:
        return None
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

    hash_fn = get_hash_fn_by_name(vc.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    return get_request_block_hasher(sched_cfg.hash_block_size, hash_fn, vc.num_hash_lookahead_tokens)


def run_trace(vc: Any, sched_cfg: Any, case: dict[str, Any]) -> list[dict[str, Any]]:
    from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes
    from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
    from vllm.v1.structured_output import StructuredOutputManager

    acceptance = Acceptance(case, vc)
    scheduler_block_size, hash_block_size = resolve_kv_cache_block_sizes(sched_cfg, vc)
    scheduler_cls = vc.scheduler_config.get_scheduler_cls()
    scheduler = scheduler_cls(vllm_config=vc, kv_cache_config=sched_cfg,
                              structured_output_manager=StructuredOutputManager(vc),
                              include_finished_set=False, log_stats=False,
                              block_size=scheduler_block_size, hash_block_size=hash_block_size)
    wl = case["workload"]
    for req in _requests(case, vc, _block_hasher(vc, sched_cfg)):
        scheduler.add_request(req)
    num_spec = vc.num_speculative_tokens if vc.speculative_config is not None else 0
    token_rng = random.Random(wl["seed"] + 2)
    vocab = vc.model_config.get_vocab_size()
    max_steps = 4 * (wl["num_requests"] * (wl["prompt_tokens"] + wl["output_tokens"]) + wl["num_requests"]) + 64
    steps: list[dict[str, Any]] = []
    if vc.scheduler_config.async_scheduling:
        _drive_async(scheduler, vc, acceptance, token_rng, vocab, max_steps, steps)
        return steps
    while scheduler.has_requests():
        if len(steps) >= max_steps:
            raise TraceError(f"scheduler loop passed its bound of {max_steps} steps "
                             f"({scheduler.get_num_unfinished_requests()} requests unfinished)")
        out = scheduler.schedule()
        req_ids, sampled, step = _fake_output(scheduler, out, acceptance, token_rng, vocab)
        steps.append(step)
        mro = ModelRunnerOutput(req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                sampled_token_ids=sampled)
        scheduler.update_from_output(out, mro)
        if num_spec and out.total_num_scheduled_tokens > 0:
            live = [r for r in req_ids if r in scheduler.requests and not scheduler.requests[r].is_finished()
                    and not scheduler.requests[r].is_prefill_chunk]
            scheduler.update_draft_token_ids(DraftTokenIds(
                req_ids=live, draft_token_ids=[[token_rng.randrange(2, vocab) for _ in range(num_spec)] for _ in live]))
    return steps


def _fake_output(scheduler: Any, out: Any, acceptance: Acceptance, token_rng: random.Random,
                 vocab: int) -> tuple[list[str], list[list[int]], dict[str, Any]]:
    """What the model runner returns for a scheduled batch (decided when it is scheduled), and the step record."""
    req_ids = list(out.num_scheduled_tokens)
    sampled: list[list[int]] = []
    num_prefill = num_decode = num_accepted = 0
    for rid in req_ids:
        req = scheduler.requests[rid]
        if req.is_prefill_chunk:
            sampled.append([])
            num_prefill += 1
            continue
        drafts = len(out.scheduled_spec_decode_tokens.get(rid, ()))
        n = acceptance.accepted(drafts) if drafts else 0
        num_accepted += n
        sampled.append([token_rng.randrange(2, vocab) for _ in range(1 + n)])
        num_decode += 1
    step = {
        "total_num_scheduled_tokens": int(out.total_num_scheduled_tokens),
        "num_scheduled_requests": len(req_ids),
        "num_spec_tokens": sum(len(v) for v in out.scheduled_spec_decode_tokens.values()),
        "num_preempted": len(out.preempted_req_ids or ()),
        "num_new_requests": len(out.scheduled_new_reqs),
        "num_prefill_chunks": num_prefill,
        "num_sampling_requests": num_decode,
        "num_accepted_tokens": num_accepted,
        "num_running": len(scheduler.running),
        "num_waiting": len(scheduler.waiting),
    }
    return req_ids, sampled, step


def _drive_async(scheduler: Any, vc: Any, acceptance: Acceptance, token_rng: random.Random, vocab: int,
                 max_steps: int, steps: list[dict[str, Any]]) -> None:
    """EngineCore.step_with_batch_queue, called until the scheduler and the queue are empty."""
    from collections import deque

    from vllm.v1.outputs import ModelRunnerOutput

    queue_size = vc.max_concurrent_batches
    batch_queue: deque = deque()
    while scheduler.has_requests() or batch_queue:
        if scheduler.has_requests():
            if len(steps) >= max_steps:
                raise TraceError(f"scheduler loop passed its bound of {max_steps} steps "
                                 f"({scheduler.get_num_unfinished_requests()} requests unfinished)")
            out = scheduler.schedule()
            req_ids, sampled, step = _fake_output(scheduler, out, acceptance, token_rng, vocab)
            steps.append(step)
            model_executed = out.total_num_scheduled_tokens > 0
            mro = ModelRunnerOutput(req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                    sampled_token_ids=sampled)
            batch_queue.appendleft((mro, out))
            if len(batch_queue) < queue_size and (model_executed or scheduler.has_requests()):
                continue
        mro, out = batch_queue.pop()
        scheduler.update_from_output(out, mro)
