"""The model runner: executes one `SchedulerOutput` on the unified pool.

Contract: `ModelRunner(target, drafter, pool, num_speculative_tokens)`;
`execute(out, params, generators, acceptance) -> StepResult` with, per scheduled request, the
sampled tokens (empty for a prefill chunk) and the drafts for its next step. The caller hands
`sampled` to `scheduler.update_from_output` and `drafts` to `update_draft_token_ids`.

One step, for a request with n scheduled inputs of which the last s are drafts
(`token_ids = known... + d_1..d_s`, positions num_computed .. num_computed + n - 1):

    query index:    0 .. n-s-2 | n-s-1          | n-s   ...  n-1
    input:          known      | last known (x) | d_1   ...  d_s
    logits row:                | 0              | 1     ...  s
    state saved to:            | slot 0         | slot 1 ... slot s   (every GDN state group)

Rows 0..s are verified (`verify.verify`): m drafts are accepted, m + 1 tokens are output.
The accepted prefix is kept without a copy: the state after input n-s-1+m is in slot m, and the
runner remembers m per request (`state_slot_index`), so the next step reads its initial state
from slot m and writes its snapshots into slots 0..s again (every kernel reads the initial state
before it writes a snapshot, so slot m may be overwritten by the same pass). A new or resumed
request starts from slot 0. Attention KV past the accepted prefix is simply overwritten later
(masks never read past a query's position). Then the drafter:
context K/V for the n - s + m accepted inputs (target residual streams at the DFlash layers),
and one query block [last output token, mask x k] at positions p .. p + k (p = the position
of the last output token) whose k mask rows give the next drafts (greedy, as vLLM drafts).
With k smaller than the drafter's block_size the first k mask positions are used.

With captured graphs (`capture_decode_graphs`) a uniform decode step runs on them whole, and a
mixed step (decode rows beside prompt chunks) runs as two passes over disjoint sequences: its
decode rows on the graphs, its prompt chunks through the eager path above (`DecodeGraphs.split`).
With prefill graphs too (`capture_prefill_graphs`), a step, or a mixed step's part past its
decode rows, that is one request's prompt chunk, or new prompts' chunks, of at most the largest
bucket each runs on them (`PrefillGraphs.can_run`). A step's result is the same request by request
whichever path runs it; only what no graph covers is launched op by op.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine_under_test.acceptance import AcceptanceModel
from engine_under_test.model.drafter import DFlashDrafter, draft_layer_name
from engine_under_test.model.forward_batch import ForwardBatch, device_tensor, slots_for
from engine_under_test.model.target import Qwen35Target
from engine_under_test.pool import UnifiedPool
from engine_under_test.runtime.caches import layer_caches
from engine_under_test.runtime.verify import verify
from engine_under_test.sampling_params import SamplingParams
from engine_under_test.scheduler.output import ScheduledRequest, SchedulerOutput

PAD_TOKEN_ID = 0   # embeds a padded draft slot (id < 0); its row is always rejected


@dataclass
class StepResult:
    sampled: dict[str, list[int]] = field(default_factory=dict)
    drafts: dict[str, list[int]] = field(default_factory=dict)
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: list[int] = field(default_factory=list)   # [i]: drafts with position i accepted
    # per verified request: (num_draft_tokens, num_accepted_tokens), so the engine can leave out a
    # request whose results it drops (finished or aborted while the step was in flight)
    verified: dict[str, tuple[int, int]] = field(default_factory=dict)

    def absorb(self, other: "StepResult") -> None:
        """Add the results of another pass of the same step (other requests)."""
        self.sampled.update(other.sampled)
        self.drafts.update(other.drafts)
        for req_id, (num_draft_tokens, num_accepted_tokens) in other.verified.items():
            self.observe_verify(req_id, num_draft_tokens, num_accepted_tokens)

    def observe_verify(self, req_id: str, num_draft_tokens: int, num_accepted_tokens: int) -> None:
        """One request's verify checked `num_draft_tokens` drafts and accepted its first
        `num_accepted_tokens`: counted in total and at positions 0 .. n - 1, as vLLM's
        `SpecDecodingStats.observe_draft` does, and recorded per request in `verified`."""
        self.verified[req_id] = (num_draft_tokens, num_accepted_tokens)
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted_tokens
        per_pos = self.num_accepted_tokens_per_pos
        if len(per_pos) < num_accepted_tokens:
            per_pos.extend([0] * (num_accepted_tokens - len(per_pos)))
        for i in range(num_accepted_tokens):
            per_pos[i] += 1


class ModelRunner:
    def __init__(self, target: Qwen35Target, drafter: DFlashDrafter | None, pool: UnifiedPool,
                 num_speculative_tokens: int):
        self.target, self.drafter, self.pool = target, drafter, pool
        self.k = num_speculative_tokens if drafter is not None else 0
        if drafter is not None and self.k > drafter.config.block_size - 1:
            raise ValueError(f"speculative_config.num_speculative_tokens: {self.k} exceeds the drafter's "
                             f"block_size - 1 = {drafter.config.block_size - 1}")
        num_draft_layers = drafter.config.num_hidden_layers if drafter is not None else 0
        self.kv, self.state = layer_caches(pool, target.config.layer_types, num_draft_layers)
        self.draft_gids = sorted({self.kv[draft_layer_name(i)].group_id for i in range(num_draft_layers)})
        self.device = pool.tensor.device
        self.block_size_tokens = pool.layout.block_size_tokens
        self.aux_layer_ids = tuple(drafter.config.target_layer_ids) if drafter is not None else ()
        self.graphs = None            # DecodeGraphs after `capture_decode_graphs`
        self.prefill_graphs = None    # PrefillGraphs after `capture_prefill_graphs`
        self.state_slot_index: dict[str, int] = {}   # request -> its slot holding the accepted state

    def state_index(self, sr: ScheduledRequest) -> int:
        """Which of the request's state slots holds its state before this step."""
        return 0 if sr.is_new or sr.num_computed_tokens == 0 else self.state_slot_index.get(sr.req_id, 0)

    def _remember_states(self, reqs: list[ScheduledRequest], accepted: dict[str, int]) -> None:
        for sr in reqs:
            self.state_slot_index[sr.req_id] = accepted.get(sr.req_id, 0)

    def capture_decode_graphs(self, sizes: tuple[int, ...], max_model_len: int) -> int:
        """Capture the decode / verify step at `sizes` (runtime/decode_graphs.py); returns the
        bytes capture added to the device allocator (0 off CUDA, where the same fixed-shape
        bodies run eagerly)."""
        from engine_under_test.runtime.decode_graphs import DecodeGraphs

        self.graphs = DecodeGraphs(self, sizes, max_model_len)
        self.graphs.capture()
        return self.graphs.captured_bytes

    def capture_prefill_graphs(self, buckets: tuple[int, ...], max_model_len: int, seq_buckets: tuple[int, ...] = (1,),
                               max_tokens: int | None = None) -> int:
        """Capture the prefill pass of up to G requests at S tokens each (runtime/prefill_graphs.py:
        S in `buckets`, G in `seq_buckets`, G x S <= max_tokens for G > 1), in the decode graphs'
        memory pool when they were captured; returns the bytes capture added to the device
        allocator (0 off CUDA, where the same fixed-shape body runs eagerly)."""
        from engine_under_test.runtime.prefill_graphs import PrefillGraphs

        self.prefill_graphs = PrefillGraphs(self, buckets, max_model_len, seq_buckets, max_tokens)
        self.prefill_graphs.capture(self.graphs.captured.pool if self.graphs is not None else None)
        return self.prefill_graphs.captured_bytes

    # -- phase helpers ---------------------------------------------------------------------
    def _target_batch(self, reqs: list[ScheduledRequest]) -> ForwardBatch:
        pos, qsl = [], [0]
        for sr in reqs:
            pos.extend(range(sr.num_computed_tokens, sr.num_computed_tokens + sr.num_scheduled_tokens))
            qsl.append(qsl[-1] + sr.num_scheduled_tokens)
        state_groups = next(iter(reqs)).state_block_ids.keys() if reqs else ()
        return ForwardBatch(
            positions=device_tensor(pos, self.device), positions_list=pos, query_start_loc=qsl,
            seq_lens=[sr.num_computed_tokens + sr.num_scheduled_tokens for sr in reqs],
            block_tables={g: [list(sr.block_ids[g]) for sr in reqs] for g in reqs[0].block_ids},
            block_size_tokens=self.block_size_tokens, causal=True,
            state_in_slots={g: [sr.state_block_ids[g][self.state_index(sr)] for sr in reqs] for g in state_groups},
            state_fresh=[sr.num_computed_tokens == 0 for sr in reqs],
            state_save_positions=[[sr.num_scheduled_tokens - len(sr.spec_token_ids) - 1 + j
                                   for j in range(len(sr.spec_token_ids) + 1)] for sr in reqs],
            state_save_slots={g: [list(sr.state_block_ids[g][:len(sr.spec_token_ids) + 1]) for sr in reqs]
                              for g in state_groups})

    def _draft_context(self, reqs: list[ScheduledRequest], batch: ForwardBatch, aux: torch.Tensor,
                       accepted: dict[str, int]) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """(residual streams, positions, pool slots by drafter group) of the drafter's context:
        the accepted inputs of every scheduled request. When every input is accepted (prompt
        chunks) they are the pass's own rows in order, taken as they are (no gather, no copy)."""
        rows, ctx_pos, ctx_qsl = [], [], [0]
        for b, sr in enumerate(reqs):
            n_ctx = sr.num_scheduled_tokens - len(sr.spec_token_ids) + accepted.get(sr.req_id, 0)
            rows.extend(range(batch.query_start_loc[b], batch.query_start_loc[b] + n_ctx))
            ctx_pos.extend(range(sr.num_computed_tokens, sr.num_computed_tokens + n_ctx))
            ctx_qsl.append(ctx_qsl[-1] + n_ctx)
        if len(rows) == batch.query_start_loc[-1]:
            return aux, batch.positions, {g: batch.slot_mapping(g) for g in self.draft_gids}
        slots = {g: slots_for([list(sr.block_ids[g]) for sr in reqs], ctx_qsl, ctx_pos, self.block_size_tokens,
                              self.device) for g in self.draft_gids}
        return aux[device_tensor(rows, self.device)], device_tensor(ctx_pos, self.device), slots

    def _draft(self, reqs: list[ScheduledRequest], batch: ForwardBatch, aux: torch.Tensor,
               sampled: dict[str, list[int]], accepted: dict[str, int]) -> dict[str, list[int]]:
        drafter, k, bs = self.drafter, self.k, self.block_size_tokens
        drafter.write_context(*self._draft_context(reqs, batch, aux, accepted), self.kv)
        # query blocks: requests that sampled and whose block table holds p + k + 1 tokens
        q_reqs, q_ids, q_pos, q_qsl = [], [], [], [0]
        for sr in reqs:
            toks = sampled.get(sr.req_id)
            if not toks:
                continue
            p = sr.num_computed_tokens + sr.num_scheduled_tokens - len(sr.spec_token_ids) + accepted[sr.req_id]
            if min(len(t) for t in sr.block_ids.values()) * bs < p + k + 1:
                continue  # at max_model_len: no room to draft, the next step decodes plainly
            q_reqs.append(sr)
            q_ids.extend([toks[-1]] + [drafter.config.mask_token_id] * k)
            q_pos.extend(range(p, p + k + 1))
            q_qsl.append(q_qsl[-1] + k + 1)
        if not q_reqs:
            return {}
        q_batch = ForwardBatch(
            positions=device_tensor(q_pos, self.device), positions_list=q_pos, query_start_loc=q_qsl,
            seq_lens=[q_pos[q_qsl[i]] + k + 1 for i in range(len(q_reqs))],
            block_tables={g: [list(sr.block_ids[g]) for sr in q_reqs] for g in reqs[0].block_ids},
            block_size_tokens=bs, causal=False)
        hidden = drafter(device_tensor(q_ids, self.device), q_batch, self.kv)
        mask_rows = device_tensor([q_qsl[i] + 1 + j for i in range(len(q_reqs)) for j in range(k)], self.device)
        draft_ids = drafter.compute_logits(hidden[mask_rows]).argmax(dim=-1).view(len(q_reqs), k).tolist()
        return {sr.req_id: ids for sr, ids in zip(q_reqs, draft_ids)}

    # -- the step --------------------------------------------------------------------------
    @torch.inference_mode()
    def execute(self, out: SchedulerOutput, params: dict[str, SamplingParams],
                generators: dict[str, torch.Generator], acceptance: AcceptanceModel | None) -> StepResult:
        for rid in out.finished_req_ids + out.preempted_req_ids:
            self.state_slot_index.pop(rid, None)
        reqs = [sr for sr in out.scheduled if sr.num_scheduled_tokens > 0]
        result = StepResult()
        if not reqs:
            return result
        if self.graphs is not None and self.graphs.can_run(reqs):
            return self._execute_captured(reqs, params, generators, acceptance)
        decode, rest = self.graphs.split(reqs) if self.graphs is not None else ([], reqs)
        if decode:
            return self._execute_split(decode, rest, params, generators, acceptance)
        return self._execute_rest(reqs, params, generators, acceptance)

    def _execute_captured(self, reqs: list[ScheduledRequest], params, generators, acceptance) -> StepResult:
        """A uniform decode step on the captured graphs, waited for."""
        result = self.graphs.execute(reqs, params, generators, acceptance, StepResult())
        return self._finish_captured(reqs, result)

    def _finish_captured(self, reqs: list[ScheduledRequest], result: StepResult) -> StepResult:
        accepted = {r: len(t) - 1 for r, t in result.sampled.items()}
        self._remember_states(reqs, accepted)
        result.drafts = self._adjust_drafts(reqs, accepted, result.drafts)
        return result

    def _execute_split(self, decode: list[ScheduledRequest], rest: list[ScheduledRequest], params, generators,
                       acceptance) -> StepResult:
        """A mixed step as two passes: its decode rows on the captured graphs, its prompt chunks
        as `_execute_rest` runs them (a prefill graph or eagerly). The passes touch disjoint
        sequences (their own blocks and state slots), so each sequence's result is what one pass
        over all of them gives. A one-sync decode part is enqueued first and read last: the
        device runs it while the host fills or launches the other pass. Either way the prompt
        chunks' results are taken first, then the decode rows'."""
        graphs = self.graphs
        launched = graphs.launch(decode, None, acceptance) if graphs.runs_one_sync(decode, params, acceptance) else None
        result = self._execute_rest(rest, params, generators, acceptance)
        if launched is not None:
            captured = self._finish_captured(decode, graphs.collect(launched, StepResult()))
        else:
            captured = self._execute_captured(decode, params, generators, acceptance)
        result.absorb(captured)
        return result

    def _execute_rest(self, reqs: list[ScheduledRequest], params, generators, acceptance) -> StepResult:
        """What the decode graphs do not run: prompt chunks on the prefill graphs when they take
        them (one request's, or several new prompts', or those as passes one after another:
        `PrefillGraphs.passes_for`), else the eager pass."""
        prefill = self.prefill_graphs
        parts = prefill.passes_for(reqs, params) if prefill is not None else None
        if parts is None:
            return self._execute_eager(reqs, params, generators, acceptance)
        result = StepResult()
        for part in parts:                 # each pass is read before the next fills the shared buffers
            done = prefill.collect(prefill.launch(part), StepResult())
            accepted = {sr.req_id: 0 for sr in part if done.sampled[sr.req_id]}
            self._remember_states(part, accepted)
            done.drafts = self._adjust_drafts(part, accepted, done.drafts)
            result.absorb(done)
        return result

    def _execute_eager(self, reqs: list[ScheduledRequest], params, generators, acceptance) -> StepResult:
        """The torch reference path: one flat forward pass over every scheduled input, verified
        on the host, then the drafter."""
        result = StepResult()
        # Phase 1: the target over every scheduled input.
        batch = self._target_batch(reqs)
        ids = device_tensor([t if t >= 0 else PAD_TOKEN_ID for sr in reqs for t in sr.token_ids], self.device)
        hidden, aux = self.target(ids, batch, self.kv, self.state, self.aux_layer_ids)
        # Phase 2: logits of the verified rows, one transfer for all argmaxes.
        sample_rows, owners = [], []
        for b, sr in enumerate(reqs):
            if sr.is_prefill_chunk:
                continue
            first = batch.query_start_loc[b] + sr.num_scheduled_tokens - len(sr.spec_token_ids) - 1
            sample_rows.extend(range(first, first + len(sr.spec_token_ids) + 1))
            owners.append((sr, len(sample_rows) - len(sr.spec_token_ids) - 1))
        accepted: dict[str, int] = {}
        if sample_rows:
            logits = self.target.compute_logits(hidden[device_tensor(sample_rows, self.device)])
            argmax = logits.argmax(dim=-1).tolist()
            # Phase 3: verification, request by request.
            for sr, start in owners:
                n_rows = len(sr.spec_token_ids) + 1
                toks = verify(logits[start:start + n_rows], list(sr.spec_token_ids), params[sr.req_id],
                              generators.get(sr.req_id), acceptance if sr.spec_token_ids else None,
                              argmax=argmax[start:start + n_rows])
                result.sampled[sr.req_id] = toks
                accepted[sr.req_id] = len(toks) - 1
                result.observe_verify(sr.req_id, sum(1 for d in sr.spec_token_ids if d >= 0), len(toks) - 1)
            del logits                     # before the drafter's own logits
        for sr in reqs:
            result.sampled.setdefault(sr.req_id, [])
        # Phase 4: the accepted prefix's recurrent state is in slot m: the next step reads it there.
        self._remember_states(reqs, accepted)
        # Phase 5: the drafter.
        if self.drafter is not None:
            result.drafts = self._adjust_drafts(reqs, accepted, self._draft(reqs, batch, aux, result.sampled, accepted))
        return result

    # -- a pipelined step ------------------------------------------------------------------
    @property
    def can_pipeline(self) -> bool:
        """Whether steps may be launched without waiting (`launch`): captured decode steps, and
        drafts that go from one step to the next on the device (no `_adjust_drafts` override)."""
        return (self.graphs is not None and self.drafter is not None
                and type(self)._adjust_drafts is ModelRunner._adjust_drafts)

    @torch.inference_mode()
    def launch(self, out: SchedulerOutput, params: dict[str, SamplingParams], acceptance: AcceptanceModel | None,
               prev=None):
        """Enqueue `out` on the device without waiting, when it is a one-sync captured decode
        step (decode_graphs.DecodeGraphs.launch); with `prev` (launched, not yet collected) when
        it can run on prev's results (`can_chain`). None when it cannot: run it with `execute`
        (after collecting prev, and with its inputs resolved: runtime/chained_inputs.py)."""
        for rid in out.finished_req_ids + out.preempted_req_ids:
            self.state_slot_index.pop(rid, None)
        reqs = [sr for sr in out.scheduled if sr.num_scheduled_tokens > 0]
        graphs = self.graphs
        if not (reqs and self.can_pipeline and graphs.runs_one_sync(reqs, params, acceptance)):
            return None
        if not (graphs.can_run(reqs) if prev is None else graphs.can_chain(reqs, prev)):
            return None
        return graphs.launch(reqs, prev, acceptance)

    def collect(self, step) -> StepResult:
        """The results of a launched step (its one sync), as `execute` returns them."""
        result = self.graphs.collect(step, StepResult())
        self._remember_states(step.reqs, {r: len(t) - 1 for r, t in result.sampled.items()})
        return result

    def _adjust_drafts(self, reqs: list[ScheduledRequest], accepted: dict[str, int],
                       drafts: dict[str, list[int]]) -> dict[str, list[int]]:
        """The drafter's proposals as they are (a hook for tests that script drafts)."""
        return drafts
