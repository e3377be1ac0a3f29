"""The step-wise engine core that `LLM` wraps and the OpenAI server drives.

Contract (thread-confined: create it and call every method from ONE thread, the server's
engine thread; it holds no locks and nothing in it is safe to share across threads):

    engine = LLMEngine(cfg, acceptance={"mode": "model"}, seed=0, load_format="safetensors")
    engine.add_request(request_id, prompt_token_ids, sampling_params)
    while engine.has_unfinished_requests():
        for out in engine.step():          # list[RequestOutput], one per request that ran
            out.new_token_ids              # tokens produced by this step (may be empty)
            out.finished, out.finish_reason
    engine.abort_request(request_id)       # drops a waiting or running request, frees its blocks
    engine.stats()                         # EngineStats: cumulative counters and pool usage

One `step()` = scheduler.schedule() -> runner.execute() (target forward on the pool, verify,
state rollback, drafting) -> scheduler.update_from_output(sampled tokens) ->
scheduler.update_draft_token_ids(drafts). Memory: the planner's pool is allocated once, in
the constructor, before weights; nothing cache-like is allocated afterwards.

Pipelined (`async_scheduling` with captured decode steps, every request greedy; the real
drafter judged, or a fixed / synthetic acceptance model decided on the device: see
runtime/device_verify.py and acceptance.py for what is exact and what is only the same
distribution): a one-sync decode step is launched and `step()` returns [] at once; every later call plans step
n + 1 while step n runs on the device, launches it behind n (its inputs derived on the device
from n's results: runtime/chained_inputs.py), and only then reads n and returns n's outputs.
So the host's scheduling, buffer fill and bookkeeping overlap the device's work. Anything that
is not the same decode step again, less requests that finished (a waiting request, a request
at max_model_len) ends the pipeline for a step: n is read first and the next step runs as a
synchronous one.
A request that finishes in step n has run once more in step n + 1; that step's results for it
are dropped, as vLLM's async scheduler drops them, and so are its spec-decode counts (drafts,
accepted tokens, accepted per position: vLLM skips a finished request's row before it counts).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from engine_under_test.acceptance import AcceptanceModel
from engine_under_test.config import EngineConfig
from engine_under_test.engine_plan import EnginePlan, build_plan, make_scheduler
from engine_under_test.model.weights import load_drafter, load_target
from engine_under_test.runtime.chained_inputs import host_resolved
from engine_under_test.runtime.decode_graphs import GRAPH_BACKENDS
from engine_under_test.runtime.runner import ModelRunner
from engine_under_test.sampling_params import SamplingParams
from engine_under_test.scheduler import Request, RequestStatus

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _allocated_bytes(device: torch.device) -> int | None:
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    return torch.cuda.memory_allocated(device)


@dataclass(frozen=True)
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    new_token_ids: list[int]
    output_token_ids: list[int]
    finished: bool
    finish_reason: str | None        # "length" | "stop" | "abort" | None while running


@dataclass
class EngineStats:
    num_steps: int = 0
    num_scheduled_tokens: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: list[int] = field(default_factory=list)   # [i]: verifies that accepted draft i (k entries)
    num_generated_tokens: int = 0
    num_preemptions: int = 0
    num_running: int = 0
    num_waiting: int = 0
    pool_num_blocks: int = 0
    pool_num_used_blocks: int = 0
    pool_bytes: int = 0
    extra: dict = field(default_factory=dict)   # "num_drafts"; "counters": {name_total: value} for /metrics

    @property
    def pool_usage(self) -> float:
        return self.pool_num_used_blocks / max(self.pool_num_blocks, 1)

    @property
    def draft_acceptance_rate(self) -> float | None:
        """Accepted drafts / verified drafts (None before any draft was verified)."""
        return None if not self.num_draft_tokens else self.num_accepted_tokens / self.num_draft_tokens


class LLMEngine:
    def __init__(self, cfg: EngineConfig, acceptance: dict | None = None, seed: int = 0,
                 load_format: str = "safetensors", dtype: str | None = None):
        if cfg.enable_prefix_caching:
            raise ValueError("enable_prefix_caching: the reference runtime does not run align mode (plan mode only)")
        spec = cfg.speculative_config
        if spec is not None and spec.method != "dflash":
            raise ValueError(f"speculative_config.method: the reference runtime runs dflash only, got {spec.method!r}")
        if spec is not None and spec.model is None:
            raise ValueError("speculative_config.model: the DFlash drafter's directory is required")
        self.cfg = cfg
        self.seed = seed
        self.plan: EnginePlan = build_plan(cfg)
        self.scheduler = make_scheduler(self.plan)
        device = torch.device(cfg.device)
        before = _allocated_bytes(device)
        self.plan.pool.allocate(device)           # Phase 1: the one bounded allocation
        after_pool = _allocated_bytes(device)
        torch_dtype = _DTYPES[dtype or self.plan.target.dtype]
        self.target = load_target(cfg.model, device, torch_dtype, load_format, seed)
        self.drafter = (load_drafter(spec.model, self.target, device, torch_dtype, load_format, seed + 1)
                        if spec is not None else None)
        after_weights = _allocated_bytes(device)
        # what the device allocator handed out for the pool and for the weights (None off CUDA)
        self.measured_bytes: dict[str, int] | None = None if before is None else {
            "pool_bytes": after_pool - before, "weights_bytes": after_weights - after_pool}
        self.runner = ModelRunner(self.target, self.drafter, self.plan.pool, cfg.num_speculative_tokens)
        self.prefill_graphs_failure: str | None = None    # why the prefill graphs were not captured, if they failed
        graphs = not cfg.enforce_eager if cfg.enforce_eager is not None else device.type == "cuda"
        if graphs and self.target.gdn_backend in GRAPH_BACKENDS:
            from engine_under_test.runtime.decode_graphs import capture_sizes
            from engine_under_test.runtime.prefill_graphs import prefill_buckets, prefill_seq_buckets

            graph_bytes = self.runner.capture_decode_graphs(capture_sizes(cfg.max_num_seqs), cfg.max_model_len)
            prefill_bytes = self._capture_prefill_graphs(prefill_buckets(cfg.max_num_batched_tokens),
                                                         prefill_seq_buckets(cfg.max_num_seqs))
            if self.measured_bytes is not None:
                self.measured_bytes["cuda_graph_bytes"] = graph_bytes + prefill_bytes
                self.measured_bytes["prefill_graph_bytes"] = prefill_bytes
        mode = (acceptance or {"mode": "model"}).get("mode", "model")
        self.acceptance = (None if mode == "model" or spec is None
                           else AcceptanceModel.from_spec(acceptance, cfg.num_speculative_tokens, seed))
        self._params: dict[str, SamplingParams] = {}
        self._prompts: dict[str, list[int]] = {}
        self._generators: dict[str, torch.Generator] = {}
        self._num_added = 0
        self._in_flight = None     # (SchedulerOutput, runner's launched step): pipelined, not yet read
        self.pipelined = cfg.async_scheduling   # launch steps without waiting where they allow it
        self._stats = EngineStats(pool_num_blocks=self.plan.memory.layout.num_blocks,
                                  pool_bytes=self.plan.memory.layout.total_bytes,
                                  num_accepted_tokens_per_pos=[0] * self.runner.k)

    def _capture_prefill_graphs(self, buckets: tuple[int, ...], seq_buckets: tuple[int, ...]) -> int:
        """The prefill graphs (runtime/prefill_graphs.py); the bytes their capture added. A capture
        that fails leaves every prompt chunk to the eager pass (the engine still serves, as it
        did before them) and says why in `prefill_graphs_failure` (the server prints it)."""
        try:
            return self.runner.capture_prefill_graphs(buckets, self.cfg.max_model_len, seq_buckets,
                                                      self.cfg.max_num_batched_tokens)
        except RuntimeError as exc:
            self.runner.prefill_graphs = None
            self.prefill_graphs_failure = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            return 0

    # -- requests ---------------------------------------------------------------------------
    def add_request(self, request_id: str, prompt_token_ids: list[int], sampling_params: SamplingParams) -> None:
        if request_id in self._params:
            raise ValueError(f"request {request_id!r} already added")
        vocab = self.target.config.vocab_size
        bad = [t for t in prompt_token_ids if not isinstance(t, int) or not 0 <= t < vocab]
        if bad:
            raise ValueError(f"request {request_id}: prompt_token_ids must be ints in [0, {vocab}), got {bad[:4]}")
        eos = None if sampling_params.ignore_eos else self.target.config.eos_token_id
        self.scheduler.add_request(Request(request_id=request_id, prompt_token_ids=list(prompt_token_ids),
                                           max_tokens=sampling_params.max_tokens, eos_token_id=eos))
        self._params[request_id] = sampling_params
        self._prompts[request_id] = list(prompt_token_ids)
        if not sampling_params.is_greedy:
            seed = sampling_params.seed if sampling_params.seed is not None else self.seed * 1_000_003 + self._num_added
            self._generators[request_id] = torch.Generator(device=self.runner.device).manual_seed(seed)
        self._num_added += 1

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests() or self._in_flight is not None

    def abort_request(self, request_id: str) -> RequestOutput | None:
        """Drop a request wherever it is; returns its final output, or None if it is unknown or done."""
        sched = self.scheduler
        req = sched.requests.get(request_id)
        if req is None or req.status.is_finished:
            return None
        # NOTE: the scheduler has no abort call yet; these are its own structures, freed its way.
        if req in sched.running:
            sched.running.remove(req)
        if req in sched.waiting:
            sched.waiting.remove(req)
        sched.kv.free(request_id)
        req.status = RequestStatus.FINISHED_STOPPED
        self._forget(request_id)
        return RequestOutput(request_id, self._prompts.pop(request_id, []), [], list(req.output_token_ids), True, "abort")

    def _forget(self, request_id: str) -> None:
        self._params.pop(request_id, None)
        self._generators.pop(request_id, None)

    # -- the step ---------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """One step's outputs. With async scheduling and captured decode steps the engine is
        pipelined: a step launched on the device returns nothing yet; the next call plans and
        launches the following step behind it, then reads it and returns its outputs."""
        if self._in_flight is not None:
            return self._step_pipelined()
        sched = self.scheduler
        out = sched.schedule()
        if self.pipelined and self.cfg.async_scheduling and self.runner.can_pipeline:
            launched = self.runner.launch(out, self._params, self.acceptance)
            if launched is not None:
                self._in_flight = (out, launched)
                return []
        result = self.runner.execute(out, self._params, self._generators, self.acceptance)
        return self._apply(out, result)

    def _step_pipelined(self) -> list[RequestOutput]:
        """Plan step n + 1 while step n runs and launch it behind n when it can run on n's
        results on the device; then read n (the one sync) and apply it. A planned step that
        cannot be launched so is run after n, its inputs resolved on the host."""
        prev_out, prev = self._in_flight
        self._in_flight = None
        planned = None
        if self._can_plan_ahead(prev_out):
            out = self.scheduler.schedule()
            planned = (out, self.runner.launch(out, self._params, self.acceptance, prev=prev))
        result = self.runner.collect(prev)
        ahead = {sr.req_id for sr in planned[0].scheduled} if planned else set()
        outputs = self._apply(prev_out, result, drafts_consumed=ahead)
        if planned is not None:
            out, launched = planned
            if launched is not None:
                self._in_flight = (out, launched)
            else:                          # requests that finished in n (or were aborted) are left out
                out = host_resolved(out, result.sampled, result.drafts, set(result.sampled), self.runner.k)
                live = tuple(sr for sr in out.scheduled if not self.scheduler.requests[sr.req_id].status.is_finished)
                out = replace(out, scheduled=live)
                outputs += self._apply(out, self.runner.execute(out, self._params, self._generators, self.acceptance))
        return outputs

    def _can_plan_ahead(self, prev_out) -> bool:
        """Step n + 1 is planned before n's results only when it will be the same decode step
        again, less requests that finished: nothing waiting, every running request ran in n,
        and each has room for 1 + k more inputs before max_model_len."""
        sched = self.scheduler
        if sched.waiting or not self.pipelined or not sched.running:
            return False
        ran = {sr.req_id for sr in prev_out.scheduled}
        room = self.cfg.max_model_len - (self.runner.k + 2)
        return all(r.request_id in ran and r.num_computed_tokens <= room for r in sched.running)

    def _apply(self, out, result, drafts_consumed: set[str] = frozenset()) -> list[RequestOutput]:
        """Hand a step's results to the scheduler and build its outputs. `drafts_consumed`: the
        requests whose drafts the next step, already launched, took on the device."""
        sched = self.scheduler
        before = {}
        for sr in out.scheduled:
            req = sched.requests[sr.req_id]
            before[sr.req_id] = (req.num_output_tokens, req.status.is_finished)
        sched.update_from_output(out, result.sampled)
        live = {rid: d for rid, d in result.drafts.items()
                if rid not in drafts_consumed and not sched.requests[rid].status.is_finished}
        if live:
            sched.update_draft_token_ids(live)
        s = self._stats
        s.num_steps += 1
        s.num_scheduled_tokens += out.total_num_scheduled_tokens
        for rid, (num_drafts, num_accepted) in result.verified.items():
            if before.get(rid, (0, True))[1]:   # finished or aborted while in flight: dropped
                continue
            s.num_draft_tokens += num_drafts
            s.num_accepted_tokens += num_accepted
            for i in range(num_accepted):
                s.num_accepted_tokens_per_pos[i] += 1
        s.num_preemptions += len(out.preempted_req_ids)
        outputs = []
        for sr in out.scheduled:
            num_before, was_finished = before[sr.req_id]
            if was_finished:               # finished (or aborted) while this step was in flight: reported then
                continue
            req = sched.requests[sr.req_id]
            new = req.output_token_ids[num_before:]
            s.num_generated_tokens += len(new)
            finished = req.status.is_finished
            reason = None
            if finished:
                reason = "stop" if req.status is RequestStatus.FINISHED_STOPPED else "length"
                self._forget(sr.req_id)
            outputs.append(RequestOutput(sr.req_id, self._prompts[sr.req_id], list(new), list(req.output_token_ids),
                                         finished, reason))
            if finished:
                self._prompts.pop(sr.req_id, None)
        return outputs

    def stats(self) -> EngineStats:
        s = self._stats
        s.num_running = len(self.scheduler.running)
        s.num_waiting = len(self.scheduler.waiting)
        s.pool_num_used_blocks = self.scheduler.kv.allocator.num_used_blocks
        return replace(s, num_accepted_tokens_per_pos=list(s.num_accepted_tokens_per_pos))
