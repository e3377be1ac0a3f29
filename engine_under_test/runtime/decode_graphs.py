"""CUDA graphs of the decode / verify step, target and drafter, at captured batch sizes.

Contract: `DecodeGraphs(runner, sizes, max_model_len)`; `capture()` builds the step's fixed
buffers for the largest size and records, for each size B (largest first, one shared memory
pool), a target graph and, with a drafter, a chain, a verify, a commit and a drafter graph;
`captured_bytes` is what capture added to the device allocator's reservation (the ledger's
graph pool estimate must hold it). `can_run(reqs)` says whether a step is a uniform decode
step the graphs run; `execute(...)` runs it and returns the same `StepResult` as the eager
runner; `launch` / `collect` run it without waiting (a pipelined step).

What it is made of, one module each:

    step_geometry.py  StepGeometry: k, L, block size, table width W, groups, captured sizes;
                      which steps are uniform decode steps, which size runs n requests
    step_buffers.py   StepBuffers: the fixed device buffers (meta, dmeta, logits, tokens,
                      deferred states, chain fields)
    step_bodies.py    StepBodies: the captured bodies (target, verify, commit, chain, draft)
    step_fills.py     StepFills: the host's fills of the buffers (target, chained, draft)
    step_graphs.py    SizeGraphs per captured size (its five graphs), their capture and replay

A uniform decode step: every scheduled request is past its prefill and feeds L = 1 + k inputs
(its last known token and k drafts, some possibly padded with id < 0); at most max(sizes)
requests. The step:

    host: fill target buffers (one copy: inputs, drafts, block tables, capacities)
    replay target graph [B]: embed .. layers (pool in place, attention through the block table)
          .. norm, logits of every row into a fixed buffer, argmax; with a drafter the
          Gated-DeltaNet layers write no recurrent state (model/deferred_states.py)
    one sync (every request greedy: `runs_one_sync`):
        replay verify graph [B] (runtime/device_verify.py): accepted m per sequence (the real
              drafter judged greedily, or a fixed / synthetic acceptance model: its thresholds
              and draws are filled with the step's inputs, `modeled` selects the rule), the
              emitted tokens, the drafter's query block built on the device
        replay commit graph [B]: each layer's state after position m into state slot m
        replay drafter graph [B]
        host: read argmax, m, drafting, drafts and emitted tokens (one buffer: the step's one sync)
    two syncs (otherwise: a sampling request, or `one_sync` off):
        host: read argmax (a sync), verify each request (eager's `verify`)
        host: write m -> replay commit graph [B]
        host: fill drafter buffers (one copy) -> replay drafter graph [B]
        host: read the drafts
    drafter graph: context K/V of all L inputs, the query block [last token, mask x k], argmax
          of the k mask rows (the accepted state stays in its slot m: the next step reads it there)

The four graphs of a size replay back to back with no host step between them on the one-sync
path; the two-sync path replays the same target, commit and drafter graphs and skips the verify
graph (it holds no memory the drafter graph reads). Context rows past the accepted prefix are written
too: they lie at positions p .. p + k - 1 of the query block, which overwrites them before any
read. Padded sequences (B > real) and sequences with no room to draft read and write only the
null block 0 in the drafter. The torch reference path (`ModelRunner` eager) stays for prefill
(but one request's chunk, or up to 16 new prompts' chunks, of up to 512 tokens each: prefill_graphs.py), the CPU and `enforce_eager`; a
mixed step runs its decode rows here and its prompt chunks there (`split`, two passes over
disjoint sequences), so only the prompt chunks' groups are launched op by op.
"""

from __future__ import annotations

import torch

from engine_under_test.runtime.device_verify import PendingRead, unpack
from engine_under_test.runtime.step_bodies import StepBodies
from engine_under_test.runtime.step_buffers import StepBuffers
from engine_under_test.runtime.step_fills import StepFills
from engine_under_test.runtime.step_geometry import StepGeometry
from engine_under_test.runtime.step_graphs import CaptureMeter, CapturedGraphs, capture_graphs, run
from engine_under_test.runtime.verify import verify

GRAPH_BACKENDS = ("fla", "fla_per_position", "torch")   # gated_delta_net.BACKENDS the graphs run
DEFAULT_CAPTURE_SIZES = (1, 2, 4, 8, 16, 24, 32)


def capture_sizes(max_num_seqs: int) -> tuple[int, ...]:
    """vLLM's pattern: 1, 2, 4, 8, then every 8, up to and including max_num_seqs."""
    sizes = [s for s in DEFAULT_CAPTURE_SIZES if s <= max_num_seqs]
    sizes += list(range(40, max_num_seqs + 1, 8))
    return tuple(sorted(set(sizes) | {max_num_seqs}))


class DecodeGraphs:
    def __init__(self, runner, sizes: tuple[int, ...], max_model_len: int):
        self.runner = runner
        self.geometry = StepGeometry.of(runner, sizes, max_model_len)
        self.sizes = self.geometry.sizes
        self.backend: str | None = None
        self.buffers: StepBuffers | None = None    # these four after `capture`
        self.bodies: StepBodies | None = None
        self.fills: StepFills | None = None
        self.captured = CapturedGraphs()            # the graphs by size, and what capture took
        self.num_chained_steps = 0         # steps launched behind the previous one (`launch`)
        self.enabled = True
        self.one_sync = True               # greedy steps verify on the device; False: every step two syncs

    @property
    def captured_bytes(self) -> int:
        return self.captured.captured_bytes

    @property
    def captured_device_bytes(self) -> int:
        return self.captured.captured_device_bytes

    @property
    def device_bytes_by_size(self) -> dict[int, int]:
        return self.captured.device_bytes_by_size

    @torch.inference_mode()
    def capture(self) -> None:
        """CUDA: build the buffers and record the graphs. Elsewhere: only the buffers; the steps
        then run the same bodies eagerly (the fixed-shape path, checked on a CPU against the
        eager runner)."""
        dev = self.runner.device
        meter = CaptureMeter(dev) if dev.type == "cuda" else None    # the buffers count as capture's
        self.buffers = StepBuffers(self.runner, self.geometry)
        self.bodies = StepBodies(self.runner, self.geometry, self.buffers)
        self.fills = StepFills(self.runner, self.geometry, self.buffers)
        self.backend = self.runner.target.gdn_backend
        self.captured = capture_graphs(self.bodies, self.buffers, self.sizes, meter, self.runner.drafter is not None)

    # -- running a step ----------------------------------------------------------------------
    def can_run(self, reqs) -> bool:
        if not (self.enabled and self.captured.by_size and self.runner.target.gdn_backend == self.backend):
            return False
        return self.geometry.accepts(reqs)

    def split(self, reqs) -> tuple[list, list]:
        """(decode rows the graphs run, the rest) of a mixed step: its requests past their prefill
        that feed L inputs, when there are some, they fit a captured size and some request is not
        one of them; else ([], reqs). The runner runs the two parts as two passes."""
        decode = [sr for sr in reqs if self.geometry.accepts([sr])]
        if not decode or len(decode) == len(reqs) or not self.can_run(decode):
            return [], list(reqs)
        taken = {sr.req_id for sr in decode}
        return decode, [sr for sr in reqs if sr.req_id not in taken]

    def runs_one_sync(self, reqs, params, acceptance) -> bool:
        """Whether the step verifies on the device: a drafter and every request greedy (greedy
        verification needs no request's generator), the real drafter judged or a fixed /
        synthetic AcceptanceModel (decided on the device from its thresholds and draws)."""
        return (self.one_sync and self.runner.drafter is not None
                and all(params[sr.req_id].is_greedy for sr in reqs))

    @torch.inference_mode()
    def execute(self, reqs, params, generators, acceptance, result):
        if self.runs_one_sync(reqs, params, acceptance):
            return self._execute_one_sync(reqs, result, acceptance)
        return self._execute_two_syncs(reqs, params, generators, acceptance, result)

    def _execute_one_sync(self, reqs, result, acceptance=None):
        """Target, verify, commit and drafter graphs back to back, then one read of the step's
        results: a launched step collected at once."""
        return self.collect(self.launch(reqs, None, acceptance), result)

    # -- a pipelined step (async scheduling) ---------------------------------------------------
    def can_chain(self, reqs, prev: "LaunchedStep") -> bool:
        """Whether `reqs`, planned before `prev`'s results, can be launched behind it: a captured
        decode step of requests that all ran in `prev` (their inputs come from its results)."""
        rows = prev.row_of
        return self.can_run(reqs) and all(sr.req_id in rows and not sr.is_new for sr in reqs)

    def launch(self, reqs, prev: "LaunchedStep | None" = None, acceptance=None) -> "LaunchedStep":
        """The one-sync step's graphs, enqueued with no wait; with `prev` (a step launched before
        and not yet collected) the inputs come from its results on the device (`can_chain`);
        `acceptance`: the AcceptanceModel that decides the accepted lengths (None: greedy
        judging). `collect` reads the results."""
        B = self.geometry.size_for(len(reqs))
        if prev is None:
            self.fills.target(reqs, acceptance)
        else:
            self.fills.chained(reqs, prev, acceptance)
            self.num_chained_steps += 1
        run(self.captured.by_size[B], self.bodies, B, chained=prev is not None)
        return LaunchedStep(reqs, self.buffers.tokens.read_async(), prev)

    def collect(self, step: "LaunchedStep", result):
        """Waits for a launched step's results (its one sync) and fills `result` as
        `_execute_one_sync` does."""
        rows = step.pending.rows(len(step.reqs))
        step.rows = rows
        sampled, drafts = unpack(rows, [sr.req_id for sr in step.reqs])
        result.sampled.update(sampled)
        result.drafts = drafts
        accepted = rows.accepted.tolist()
        if step.prev is None:
            num_drafts = [sum(1 for d in sr.spec_token_ids if d >= 0) for sr in step.reqs]
        else:                              # the drafts came from the previous step's drafting rows
            prev_rows, row_of = step.prev.rows, step.prev.row_of
            num_drafts = [self.geometry.k * int(prev_rows.drafting[row_of[sr.req_id]]) for sr in step.reqs]
            step.prev = None               # its results are read: nothing holds the chain
        for sr, n, m in zip(step.reqs, num_drafts, accepted):
            result.observe_verify(sr.req_id, n, int(m))
        return result

    def _execute_two_syncs(self, reqs, params, generators, acceptance, result):
        """Target graph, host verification (`verify`) and drafter inputs, drafter graph."""
        B = self.geometry.size_for(len(reqs))
        L, k = self.geometry.L, self.geometry.k
        buf, bodies, graphs = self.buffers, self.bodies, self.captured.by_size[B]
        self.fills.target(reqs)
        aux = bodies.target(B) if graphs.target is None else graphs.target.replay()
        argmax = buf.argmax[:len(reqs) * L].tolist()             # the step's sync: sampled tokens
        accepted: dict[str, int] = {}
        for b, sr in enumerate(reqs):
            toks = verify(buf.logits[b * L:(b + 1) * L], list(sr.spec_token_ids), params[sr.req_id],
                          generators.get(sr.req_id), acceptance if sr.spec_token_ids else None,
                          argmax=argmax[b * L:(b + 1) * L])
            result.sampled[sr.req_id] = toks
            accepted[sr.req_id] = len(toks) - 1
            result.observe_verify(sr.req_id, sum(1 for d in sr.spec_token_ids if d >= 0), len(toks) - 1)
        if self.runner.drafter is None:
            return result
        m = torch.tensor([accepted[sr.req_id] for sr in reqs], dtype=torch.long)
        buf.tokens.accepted[:len(reqs)].copy_(m)                   # the commit's input
        if graphs.commit is None:
            bodies.commit(B)
        else:
            graphs.commit.replay()
        drafting = self.fills.draft(reqs, result.sampled, accepted)
        if graphs.draft is None:
            bodies.draft(B, aux)
        else:
            graphs.draft.replay()
        draft_ids = buf.draft_argmax[:len(reqs) * k].view(len(reqs), k).tolist()
        result.drafts = {reqs[b].req_id: draft_ids[b] for b in drafting}
        return result


class LaunchedStep:
    """A one-sync step enqueued on the device and not yet collected: its requests, the pending
    read of its results, and the step it was chained behind (until collected)."""

    def __init__(self, reqs, pending: PendingRead, prev: "LaunchedStep | None"):
        self.reqs, self.pending, self.prev = list(reqs), pending, prev
        self.row_of = {sr.req_id: b for b, sr in enumerate(self.reqs)}
        self.rows = None                   # StepResultRows, once collected
