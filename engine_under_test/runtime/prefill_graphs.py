"""CUDA graphs of a prefill pass: up to G requests' prompt chunks, each padded to a bucket of S tokens.

Contract: `PrefillGraphs(runner, buckets, max_model_len, seq_buckets=(1,), max_tokens=None)`;
its graphs are keyed (G, S): S in `buckets` (token counts), G in `seq_buckets` (sequence
counts), every (1, S), and (G, S) for G > 1 where G x S <= max_tokens (the step budget: a pass
never holds more rows than an eager step of the budget would). `capture(pool)` builds the fixed
buffers for the largest key and records, for each key (largest first), one graph of the whole
pass (prefill_bodies.py: the target over G S rows, each sequence's last input's logits and
argmax, with a drafter its context write and query blocks), in `pool` (the decode graphs',
shared: the two never replay interleaved) after two warm-up runs on a side stream (Triton
compilation and autotuning, fla's included); with fla it then runs fla's varlen kernels once
(`warm_varlen_chunk`: the eager path's, which no graph runs, so that their first call is not in
the middle of serving); `captured_bytes` is what capture added to the device allocator's
reservation. `can_run(reqs, params)` says whether a step (or the part of a
mixed step the decode graphs do not run) is one the graphs run; `launch(reqs)` fills the
buffers and replays, `collect(step, result)` reads the pass's tokens and drafts (one sync) into a
`StepResult` as the eager runner fills it; `passes_for(reqs, params)` splits a step that no one
pass runs into passes that do (a later chunk alone, new prompts in groups). Off CUDA nothing is
captured and the same body runs eagerly (the fixed-shape path, checked on a CPU against the eager
runner).

A step the graphs run: n <= max(seq_buckets) requests, none with drafts, each with at most
max(buckets) inputs (a prompt chunk, or a plain decode input when there was no room to draft),
tables within the decode geometry's width W, and a greedy request when its chunk samples (the
pass's token is its argmax; a sampling request's token is drawn on the host from the logits, so
it stays eager). One request may be anywhere in its prompt (its attention reads its table);
several must all be new prompts (no token computed before the chunk: each attends to its own
rows) and fit a captured key (G >= n, S >= their longest chunk). Its result, request by request,
is the eager runner's: the token after the last input (nothing for a chunk that does not end its
prompt), the state after the last input in slot 0, the drafter's context, and the drafts when
the chunk ends the prompt and the tables have room.

Why: an eager prefill pass launches about 2,800 ATen ops at the 2b shapes whatever its length,
so the first token of one 512-token prompt, the short last prompt chunk of a c = 32 wave's third
step, and the first steps of a rung's prompts (c prompts at once: 16 x 512 tokens at c = 32) wait
for the host's launches (benchmarks/NOTES.md); one replay launches none.
"""

from __future__ import annotations

import torch

from engine_under_test.model.gated_delta_net import warm_varlen_chunk
from engine_under_test.runtime.prefill_bodies import PrefillBodies
from engine_under_test.runtime.prefill_buffers import PrefillBuffers
from engine_under_test.runtime.prefill_fills import PrefillFills
from engine_under_test.runtime.step_geometry import StepGeometry
from engine_under_test.runtime.step_graphs import CaptureMeter

# NOTE: up to 512 tokens a sequence: a longer chunk runs eagerly (its pass is bound by the device,
# not the host's launches), and the graph pool holds no larger sequence's activations
DEFAULT_PREFILL_BUCKETS = (64, 128, 256, 512)
# NOTE: sequences a pass, in powers of two; 16 x 512 is the 2b case's whole step budget (8,192), so
# the pool holds the activations of one step of the budget, which an eager step of it would hold too
DEFAULT_PREFILL_SEQS = (1, 2, 4, 8, 16)


def prefill_buckets(max_num_batched_tokens: int) -> tuple[int, ...]:
    """DEFAULT_PREFILL_BUCKETS below the step budget, then the budget itself if it is below the
    largest (a chunk never holds more tokens than the budget)."""
    largest = min(max_num_batched_tokens, DEFAULT_PREFILL_BUCKETS[-1])
    return tuple(sorted({b for b in DEFAULT_PREFILL_BUCKETS if b < largest} | {largest}))


def prefill_seq_buckets(max_num_seqs: int) -> tuple[int, ...]:
    """DEFAULT_PREFILL_SEQS up to max_num_seqs (a step never holds more requests)."""
    return tuple(g for g in DEFAULT_PREFILL_SEQS if g <= max_num_seqs)


class PrefillGraphs:
    def __init__(self, runner, buckets: tuple[int, ...], max_model_len: int, seq_buckets: tuple[int, ...] = (1,),
                 max_tokens: int | None = None):
        if not buckets or min(buckets) < 1:
            raise ValueError(f"prefill graphs: buckets must be positive token counts, got {buckets!r}")
        if 1 not in seq_buckets or min(seq_buckets) < 1:
            raise ValueError(f"prefill graphs: sequence buckets must be positive and hold 1, got {seq_buckets!r}")
        self.runner = runner
        self.buckets = tuple(sorted(set(buckets)))
        limit = max_tokens if max_tokens is not None else self.buckets[-1]
        self.keys = tuple(sorted((G, S) for G in set(seq_buckets) for S in self.buckets if G == 1 or G * S <= limit))
        self.seq_buckets = tuple(sorted({G for G, _ in self.keys}))
        self.geometry = StepGeometry.of(runner, (1,), max_model_len)
        self.backend: str | None = None
        self.buffers: PrefillBuffers | None = None      # these three after `capture`
        self.bodies: PrefillBodies | None = None
        self.fills: PrefillFills | None = None
        self.graphs: dict[tuple[int, int], "torch.cuda.CUDAGraph | None"] = {}
        self.captured_bytes = 0
        self.enabled = True
        self.num_passes = 0                 # passes run on the graphs (or their bodies off CUDA)
        self.warmed_varlen = False          # whether capture ran fla's varlen kernels for the eager path

    @torch.inference_mode()
    def capture(self, pool=None) -> None:
        """CUDA: the buffers and one graph per key, in `pool` (a graph pool handle; a new one
        if None). Elsewhere: only the buffers; passes then run the bodies eagerly."""
        dev = self.runner.device
        meter = CaptureMeter(dev) if dev.type == "cuda" else None    # the buffers count as capture's
        self.buffers = PrefillBuffers(self.runner, self.geometry, self.seq_buckets[-1],
                                      max(G * S for G, S in self.keys))
        self.bodies = PrefillBodies(self.runner, self.geometry, self.buffers)
        self.fills = PrefillFills(self.runner, self.geometry, self.buffers)
        self.backend = self.runner.target.gdn_backend
        self.graphs = {key: None for key in self.keys}
        if meter is None:
            return
        self.buffers.reset()
        pool = torch.cuda.graph_pool_handle() if pool is None else pool
        side = torch.cuda.Stream(dev)
        for G, S in sorted(self.keys, key=lambda key: (key[0] * key[1], key), reverse=True):
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):            # warm-up: compilation, autotuning, handles
                for _ in range(2):
                    self.bodies.run(G, S)
            torch.cuda.current_stream(dev).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self.bodies.run(G, S)
            self.graphs[(G, S)] = graph
        if self.backend == "fla":                    # the eager path's varlen kernels (warm_varlen_chunk)
            cfg = self.runner.target.config
            self.warmed_varlen = warm_varlen_chunk(cfg.linear_num_key_heads, cfg.linear_num_value_heads,
                                                   cfg.linear_key_head_dim, cfg.linear_value_head_dim,
                                                   self.runner.target.lm_head.weight.dtype, dev)
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()
        self.captured_bytes = meter.allocator_bytes()

    def key_for(self, reqs) -> tuple[int, int] | None:
        """The captured key (G, S) that runs `reqs` (the smallest G, then S, that holds them), or None."""
        n, longest = len(reqs), max(sr.num_scheduled_tokens for sr in reqs)
        return next(((G, S) for G, S in self.keys if G >= n and S >= longest), None)     # keys: sorted

    def can_run(self, reqs, params) -> bool:
        if not (self.enabled and self.graphs and reqs and self.runner.target.gdn_backend == self.backend):
            return False
        geo = self.geometry
        for sr in reqs:
            if sr.spec_token_ids or not 0 < sr.num_scheduled_tokens <= self.buckets[-1]:
                return False
            if not sr.is_prefill_chunk and not params[sr.req_id].is_greedy:
                return False
            if len(reqs) > 1 and sr.num_computed_tokens != 0:      # several: new prompts only (own keys)
                return False
            if (any(len(sr.block_ids[g]) > geo.W for g in geo.attn_gids)
                    or any(len(sr.state_block_ids[s]) < 1 for s in geo.state_gids)):
                return False
        return self.key_for(reqs) is not None

    def passes_for(self, reqs, params) -> list[list] | None:
        """The passes on the graphs that run `reqs`, one after another: all of them in one when
        `can_run` says so; else each request past its first chunk alone and the new prompts in
        groups of at most max(seq_buckets), when every such pass can run; else None (eager). The
        passes touch disjoint sequences (their own blocks and state slots), so each request's
        result is what one pass over all of them gives.

        NOTE: why: arrivals spread over a millisecond can leave a prompt's later chunk beside new
        prompts (own-key attention takes new prompts only); that step was an eager pass of about
        2,800 ATen ops in the middle of a c = 32 wave."""
        if self.can_run(reqs, params):
            return [list(reqs)]
        started = [[sr] for sr in reqs if sr.num_computed_tokens != 0]
        new = [sr for sr in reqs if sr.num_computed_tokens == 0]
        G = self.seq_buckets[-1]                 # the keys always hold G = 1
        parts = started + [new[i:i + G] for i in range(0, len(new), G)]
        return parts if len(parts) > 1 and all(self.can_run(part, params) for part in parts) else None

    def launch(self, reqs) -> "LaunchedPrefill":
        """Fill the buffers with `reqs`' pass and replay its key's graph (off CUDA: run the
        body); the result's read is enqueued, not waited for."""
        G, S = self.key_for(reqs)
        drafting = self.fills.fill(reqs, G, S)
        graph = self.graphs[(G, S)]
        if graph is None:
            self.bodies.run(G, S)
        else:
            graph.replay()
        self.num_passes += 1
        return LaunchedPrefill(list(reqs), self.buffers.tokens.read_async(), drafting)

    def collect(self, step: "LaunchedPrefill", result):
        """Waits for the pass (its one sync) and fills `result` as the eager runner does: each
        request's token when its chunk ends its prompt (a verify of no drafts), its drafts when it
        drafted."""
        rows = step.pending.rows(len(step.reqs))
        for i, sr in enumerate(step.reqs):
            result.sampled[sr.req_id] = [] if sr.is_prefill_chunk else [int(rows.argmax[i, 0])]
            if not sr.is_prefill_chunk:
                result.observe_verify(sr.req_id, 0, 0)
            if step.drafting[i]:
                result.drafts[sr.req_id] = rows.drafts[i].tolist()
        return result


class LaunchedPrefill:
    """A prefill pass enqueued on the device: its requests, the pending read of their tokens and
    drafts, and which requests' drafts are their next ones."""

    def __init__(self, reqs, pending, drafting: list[bool]):
        self.reqs, self.pending, self.drafting = reqs, pending, drafting
