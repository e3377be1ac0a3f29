"""CUDA graphs of a prefill pass: one request's prompt chunk, padded to a bucket of S tokens.

Contract: `PrefillGraphs(runner, buckets, max_model_len)`; `capture(pool)` builds the fixed
buffers for the largest bucket and records, for each bucket S (largest first), one graph of the
whole pass (prefill_bodies.py: the target over S rows, the last input's logits and argmax, with a
drafter its context write and query block), in `pool` (the decode graphs', shared: the two never
replay interleaved) after two warm-up runs on a side stream (Triton compilation and autotuning,
fla's included); `captured_bytes` is what capture added to the device allocator's reservation.
`can_run(reqs, params)` says whether a step (or the part of a mixed step the decode graphs do
not run) is one the graphs run; `launch(sr)` fills the buffers and replays, `collect(step,
result)` reads the pass's token and drafts (one sync) into a `StepResult` as the eager runner
fills it. Off CUDA nothing is captured and the same body runs eagerly (the fixed-shape path,
checked on a CPU against the eager runner).

A step the graphs run: one request, no drafts, n <= max(buckets) inputs (a prompt chunk, or a
plain decode input when there was no room to draft), tables within the decode geometry's width
W, and a greedy request when the chunk samples (the pass's token is its argmax; a sampling
request's token is drawn on the host from the logits, so it stays eager). Its result, request by
request, is the eager runner's: the token after the last input (nothing for a chunk that does
not end its prompt), the state after the last input in slot 0, the drafter's context, and the
drafts when the chunk ends the prompt and the tables have room.

Why: an eager prefill pass launches about 2,800 ATen ops at the 2b shapes whatever its length,
so the first token of one 512-token prompt, and the short last prompt chunk of a c = 32 wave's
third step, wait for the host's launches (benchmarks/NOTES.md); one replay launches none.
"""

from __future__ import annotations

import torch

from engine_under_test.runtime.prefill_bodies import PrefillBodies
from engine_under_test.runtime.prefill_buffers import PrefillBuffers
from engine_under_test.runtime.prefill_fills import PrefillFills
from engine_under_test.runtime.step_geometry import StepGeometry
from engine_under_test.runtime.step_graphs import CaptureMeter

# NOTE: up to 512 tokens, where an eager pass waits on the host's launches more than on the device
# (a 512-token prompt at the 2b shapes: about 5 ms of device work against 48 - 53 ms to its first
# token); a longer chunk runs eagerly, and the graph pool holds no larger pass's activations
DEFAULT_PREFILL_BUCKETS = (64, 128, 256, 512)


def prefill_buckets(max_num_batched_tokens: int) -> tuple[int, ...]:
    """DEFAULT_PREFILL_BUCKETS below the step budget, then the budget itself if it is below the
    largest (a chunk never holds more tokens than the budget)."""
    largest = min(max_num_batched_tokens, DEFAULT_PREFILL_BUCKETS[-1])
    return tuple(sorted({b for b in DEFAULT_PREFILL_BUCKETS if b < largest} | {largest}))


class PrefillGraphs:
    def __init__(self, runner, buckets: tuple[int, ...], max_model_len: int):
        if not buckets or min(buckets) < 1:
            raise ValueError(f"prefill graphs: buckets must be positive token counts, got {buckets!r}")
        self.runner = runner
        self.buckets = tuple(sorted(set(buckets)))
        self.geometry = StepGeometry.of(runner, (1,), max_model_len)
        self.backend: str | None = None
        self.buffers: PrefillBuffers | None = None      # these three after `capture`
        self.bodies: PrefillBodies | None = None
        self.fills: PrefillFills | None = None
        self.graphs: dict[int, "torch.cuda.CUDAGraph | None"] = {}
        self.captured_bytes = 0
        self.enabled = True
        self.num_passes = 0                 # passes run on the graphs (or their bodies off CUDA)

    @torch.inference_mode()
    def capture(self, pool=None) -> None:
        """CUDA: the buffers and one graph per bucket, in `pool` (a graph pool handle; a new one
        if None). Elsewhere: only the buffers; passes then run the bodies eagerly."""
        dev = self.runner.device
        meter = CaptureMeter(dev) if dev.type == "cuda" else None    # the buffers count as capture's
        self.buffers = PrefillBuffers(self.runner, self.geometry, self.buckets[-1])
        self.bodies = PrefillBodies(self.runner, self.geometry, self.buffers)
        self.fills = PrefillFills(self.runner, self.geometry, self.buffers)
        self.backend = self.runner.target.gdn_backend
        self.graphs = {S: None for S in self.buckets}
        if meter is None:
            return
        self.buffers.reset()
        pool = torch.cuda.graph_pool_handle() if pool is None else pool
        side = torch.cuda.Stream(dev)
        for S in sorted(self.buckets, reverse=True):
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):            # warm-up: compilation, autotuning, handles
                for _ in range(2):
                    self.bodies.run(S)
            torch.cuda.current_stream(dev).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self.bodies.run(S)
            self.graphs[S] = graph
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()
        self.captured_bytes = meter.allocator_bytes()

    def bucket_for(self, num_tokens: int) -> int:
        return next(S for S in self.buckets if S >= num_tokens)

    def can_run(self, reqs, params) -> bool:
        if not (self.enabled and self.graphs and len(reqs) == 1 and self.runner.target.gdn_backend == self.backend):
            return False
        sr = reqs[0]
        if sr.spec_token_ids or not 0 < sr.num_scheduled_tokens <= self.buckets[-1]:
            return False
        if not sr.is_prefill_chunk and not params[sr.req_id].is_greedy:
            return False
        geo = self.geometry
        return (all(len(sr.block_ids[g]) <= geo.W for g in geo.attn_gids)
                and all(len(sr.state_block_ids[s]) >= 1 for s in geo.state_gids))

    def launch(self, sr) -> "LaunchedPrefill":
        """Fill the buffers with `sr`'s pass and replay its bucket's graph (off CUDA: run the
        body); the result's read is enqueued, not waited for."""
        S = self.bucket_for(sr.num_scheduled_tokens)
        drafting = self.fills.fill(sr, S)
        graph = self.graphs[S]
        if graph is None:
            self.bodies.run(S)
        else:
            graph.replay()
        self.num_passes += 1
        return LaunchedPrefill(sr, self.buffers.tokens.read_async(), drafting)

    def collect(self, step: "LaunchedPrefill", result):
        """Waits for the pass (its one sync) and fills `result` as the eager runner does: the
        token when the chunk ends its prompt (a verify of no drafts), the drafts when it drafted."""
        rows = step.pending.rows(1)
        sr = step.sr
        result.sampled[sr.req_id] = [] if sr.is_prefill_chunk else [int(rows.argmax[0, 0])]
        if not sr.is_prefill_chunk:
            result.observe_verify(sr.req_id, 0, 0)
        if step.drafting:
            result.drafts[sr.req_id] = rows.drafts[0].tolist()
        return result


class LaunchedPrefill:
    """A prefill pass enqueued on the device: its request, the pending read of its token and
    drafts, and whether the drafts are the request's next ones."""

    def __init__(self, sr, pending, drafting: bool):
        self.sr, self.pending, self.drafting = sr, pending, drafting
