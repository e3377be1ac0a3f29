"""CUDA graphs of the decode / verify step, target and drafter, at captured batch sizes.

Contract: `DecodeGraphs(runner, sizes)` builds fixed buffers for the largest size;
`capture()` records, for each size B (largest first, one shared memory pool), a target graph
and, with a drafter, a verify graph, a commit graph and a drafter graph; `captured_bytes` is what capture added
to the device allocator's reservation (the ledger's graph pool estimate must hold it).
`can_run(reqs)` says whether a step is a uniform decode step the graphs run; `execute(...)`
runs it and returns the same `StepResult` as the eager runner.

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
null block 0 in the drafter. The torch reference path (`ModelRunner` eager) stays for prefill,
mixed steps, the CPU and `enforce_eager`.
"""

from __future__ import annotations

from itertools import chain

import numpy as np
import torch

from engine_under_test.model.deferred_states import DeferredStates
from engine_under_test.model.drafter import draft_layer_name
from engine_under_test.model.linear_attention import StateSlots
from engine_under_test.model.static_batch import StaticBatch
from engine_under_test.runtime.chained_inputs import chain_inputs
from engine_under_test.runtime.decode_buffers import MetaBuffers
from engine_under_test.runtime.device_verify import (PendingRead, StepTokens, accepted_lengths, draft_query,
                                                     emitted_tokens, modeled_accepted_lengths, unpack)
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
        self.sizes = tuple(sorted(sizes))
        self.k = runner.k
        self.L = 1 + self.k
        self.bs = runner.block_size_tokens
        self.W = -(-(max_model_len + self.k + 1) // self.bs) + 1
        kv, state = runner.kv, runner.state
        self.attn_gids = sorted({c.group_id for c in kv.values()})
        self.state_gids = sorted({c.group_id for c in state.values()})
        self.draft_gids = sorted({kv[draft_layer_name(i)].group_id
                                  for i in range(runner.drafter.config.num_hidden_layers)}) if runner.drafter else []
        self.backend: str | None = None
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.cuda.CUDAGraph | None]] = {}  # target, drafter
        self.verify_graphs: dict[int, torch.cuda.CUDAGraph | None] = {}
        self.commit_graphs: dict[int, torch.cuda.CUDAGraph | None] = {}
        self.chain_graphs: dict[int, torch.cuda.CUDAGraph | None] = {}   # a pipelined step's inputs
        self.num_chained_steps = 0         # steps launched behind the previous one (`launch`)
        self.captured_bytes = 0            # the device allocator's reservation added by capture
        self.captured_device_bytes = 0     # device memory capture took, allocator or not (free bytes)
        self.device_bytes_by_size: dict[int, int] = {}   # cumulative, after each size's graphs
        self.enabled = True
        self.one_sync = True               # greedy steps verify on the device; False: every step two syncs

    # -- buffers -----------------------------------------------------------------------------
    def _alloc(self) -> None:
        Bm, L, W, k = max(self.sizes), self.L, self.W, self.k
        dev = self.runner.device
        f = {"ids": (Bm * L,), "pos": (Bm * L,), "seq_lens": (Bm,), "prev_row": (Bm,), "nc_opt": (Bm,)}
        defaults = {"seq_lens": 1, "prev_row": -1, **{f"fresh{s}": 1 for s in self.state_gids}}
        if self.runner.drafter is not None:    # the one-sync path's inputs (padding: no drafts, no room)
            # modeled [1]: 1 = an acceptance model decides (thresholds [k], draws [Bm, k]), 0 = greedy
            f |= {"drafts": (Bm, k), "capacity_tokens": (Bm,), "modeled": (1,), "thresholds": (k,), "draws": (Bm, k)}
            defaults["drafts"] = -1
        for g in self.attn_gids:
            f |= {f"table{g}": (Bm, W), f"blk{g}": (Bm * L,), f"row{g}": (Bm * L,)}
        for s in self.state_gids:
            f |= {f"src{s}": (Bm,), f"fresh{s}": (Bm,), f"dst{s}": (Bm, L), f"save{s}": (Bm, L)}
        self.meta = MetaBuffers(f, defaults, dev)
        if self.runner.drafter is not None:
            d = {"q_ids": (Bm * (k + 1),), "q_pos": (Bm * (k + 1),), "q_seq_lens": (Bm,)}
            for g in self.draft_gids:
                d |= {f"q_blk{g}": (Bm * (k + 1),), f"q_row{g}": (Bm * (k + 1),)}
            self.dmeta = MetaBuffers(d, {"q_seq_lens": 1}, dev)
        target = self.runner.target
        vocab, dtype = target.lm_head.weight.shape[0], target.lm_head.weight.dtype
        self.logits = torch.empty(Bm * max(L, k), vocab, dtype=dtype, device=dev)
        self.tokens = StepTokens(Bm, L, k, dev)          # every result of the step, one buffer
        self.argmax, self.draft_argmax = self.tokens.argmax, self.tokens.drafts
        # the verify pass writes no recurrent state; the commit writes the accepted one
        self.deferred = DeferredStates(Bm) if self.runner.drafter is not None else None
        self.chain_fields = None
        if self.runner.drafter is not None and dev.type == "cuda":
            from engine_under_test.runtime.chain_kernel import ChainFields

            self.chain_fields = ChainFields(self.meta.offsets, self.attn_gids, self.state_gids, W, dev)

    # -- the captured bodies -----------------------------------------------------------------
    def _target_body(self, B: int) -> torch.Tensor | None:
        m, L, T = self.meta, self.L, B * self.L
        batch = StaticBatch(B, L, self.bs, True, m.view("pos")[:T], m.view("seq_lens")[:B],
                            {g: m.view(f"table{g}")[:B] for g in self.attn_gids},
                            {g: (m.view(f"blk{g}")[:T], m.view(f"row{g}")[:T]) for g in self.attn_gids})
        seq = torch.arange(B, device=self.runner.device).repeat_interleave(L)
        pos = torch.arange(L, device=self.runner.device).repeat(B)
        if self.deferred is not None:
            self.deferred.begin()
        for s in self.state_gids:
            dst = m.view(f"dst{s}")[:B]
            batch.set_state_slots(s, StateSlots(
                src=m.view(f"src{s}")[:B], fresh=m.view(f"fresh{s}")[:B] != 0, any_fresh=True, all_states=True,
                save_seq=seq, save_pos=pos, save_dst=dst.reshape(-1), dst_grid=dst, save_grid=m.view(f"save{s}")[:B],
                deferred=self.deferred))
        r = self.runner
        hidden, aux = r.target(m.view("ids")[:T], batch, r.kv, r.state, r.aux_layer_ids)
        torch.mm(hidden, r.target.lm_head.weight.t(), out=self.logits[:T])
        _argmax(self.logits[:T], self.argmax[:T])
        return aux

    def _verify_body(self, B: int) -> None:
        """Verification of the B greedy sequences on the device and the drafter's query block
        (device_verify.py): reads the target's argmax, the step's drafts and the acceptance
        model's inputs, writes the drafter's query buffers and the accepted / drafting / emitted
        results. Both rules run (fixed shapes); `modeled` picks one, so one graph serves both."""
        m, L = self.meta, self.L
        argmax = self.argmax[:B * L].view(B, L)
        drafts = m.view("drafts")[:B]
        judged = accepted_lengths(argmax, drafts)
        modeled = modeled_accepted_lengths(drafts, m.view("draws")[:B], m.view("thresholds"))
        accepted = torch.where(m.view("modeled") != 0, modeled, judged)
        num_computed = m.view("pos")[:B * L].view(B, L)[:, 0]
        tables = {g: m.view(f"table{g}")[:B] for g in self.draft_gids}
        query, drafting = draft_query(argmax, accepted, num_computed, m.view("capacity_tokens")[:B], tables,
                                      self.bs, self.runner.drafter.config.mask_token_id)
        for name, value in query.items():
            self.dmeta.view(name)[:value.numel()].copy_(value.reshape(-1))
        self.tokens.accepted[:B].copy_(accepted)
        self.tokens.drafting[:B].copy_(drafting)
        self.tokens.emitted[:B * L].copy_(emitted_tokens(argmax, drafts, accepted).reshape(-1))

    def _commit_body(self, B: int) -> None:
        """The recurrent state after each sequence's accepted prefix, `tokens.accepted` [B], into
        its slot (model/deferred_states.py; nothing for layers that saved every position)."""
        self.deferred.commit(self.tokens.accepted[:B])

    def _chain_body(self, B: int) -> None:
        """A pipelined step's inputs from the previous step's results, still in `tokens`
        (runtime/chained_inputs.py): rows with prev_row >= 0 get their ids, positions, KV
        (block, row), sequence length, drafts and state source; the others keep the host's."""
        m, L, k = self.meta, self.L, self.k
        if self.chain_fields is not None:     # CUDA: one kernel (runtime/chain_kernel.py), same values
            from engine_under_test.runtime.chain_kernel import chain_in_place

            t = self.tokens
            chain_in_place(m.device_buffer, self.chain_fields, t.argmax, t.accepted, t.drafting, t.drafts, B, k,
                           self.bs)
            return
        valid, vals = chain_inputs(self.tokens.argmax, self.tokens.accepted, self.tokens.drafting, self.tokens.drafts,
                                   m.view("prev_row")[:B], m.view("nc_opt")[:B],
                                   {g: m.view(f"table{g}")[:B] for g in self.attn_gids},
                                   {s: m.view(f"dst{s}")[:B] for s in self.state_gids}, k, self.bs)
        for name, value in vals.items():
            flat = m.view(name).reshape(-1)[:value.numel()]
            keep = valid.view(B, *[1] * (value.dim() - 1)).expand_as(value).reshape(-1)
            flat.copy_(torch.where(keep, value.reshape(-1), flat))

    def _draft_body(self, B: int, aux: torch.Tensor) -> None:
        r, m, d, k = self.runner, self.meta, self.dmeta, self.k
        T, Q = B * self.L, B * (k + 1)
        r.drafter.write_context(aux, m.view("pos")[:T],
                                {g: (m.view(f"blk{g}")[:T], m.view(f"row{g}")[:T]) for g in self.draft_gids}, r.kv)
        batch = StaticBatch(B, k + 1, self.bs, False, d.view("q_pos")[:Q], d.view("q_seq_lens")[:B],
                            {g: m.view(f"table{g}")[:B] for g in self.draft_gids},
                            {g: (d.view(f"q_blk{g}")[:Q], d.view(f"q_row{g}")[:Q]) for g in self.draft_gids})
        hidden = r.drafter(d.view("q_ids")[:Q], batch, r.kv)
        rows = hidden.view(B, k + 1, -1)[:, 1:].reshape(B * k, -1)
        torch.mm(rows, r.drafter.lm_head.weight.t(), out=self.logits[:B * k])
        _argmax(self.logits[:B * k], self.draft_argmax[:B * k])

    @torch.inference_mode()
    def capture(self) -> None:
        """CUDA: record the graphs. Elsewhere: only the buffers; `execute` then runs the same
        bodies eagerly (the fixed-shape path, checked on a CPU against the eager runner)."""
        dev = self.runner.device
        if dev.type != "cuda":
            self._alloc()
            self.backend = self.runner.target.gdn_backend
            self.graphs = {B: (None, None) for B in self.sizes}
            self.verify_graphs = {B: None for B in self.sizes}
            self.commit_graphs = {B: None for B in self.sizes}
            self.chain_graphs = {B: None for B in self.sizes}
            return
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()                     # what is cached but unused is not capture's
        before = torch.cuda.memory_reserved(dev)
        free_before = torch.cuda.mem_get_info(dev)[0]
        self._alloc()
        self.backend = self.runner.target.gdn_backend
        self.meta.fill({})
        if self.runner.drafter is not None:
            self.dmeta.fill({})
        pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream(dev)
        for B in sorted(self.sizes, reverse=True):
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):            # warm-up: kernel compilation, handles
                for _ in range(2):
                    aux = self._target_body(B)
                    if self.runner.drafter is not None:
                        self._chain_body(B)
                        self._verify_body(B)
                        self._commit_body(B)
                        self._draft_body(B, aux)
            torch.cuda.current_stream(dev).wait_stream(side)
            del aux
            gt = torch.cuda.CUDAGraph()
            with torch.cuda.graph(gt, pool=pool):
                aux = self._target_body(B)
            gv = gc = gd = gch = None
            if self.runner.drafter is not None:
                # captured: target, chain, verify, commit, drafter; replayed in that order except the
                # chain graph, which goes first (only pipelined steps). It reads the step results
                # and writes the meta buffers, both outside the pool, so its pool memory holds no
                # output another graph reads, and no output of another graph is placed in it.
                gch = torch.cuda.CUDAGraph()
                with torch.cuda.graph(gch, pool=pool):
                    self._chain_body(B)
                gv = torch.cuda.CUDAGraph()
                with torch.cuda.graph(gv, pool=pool):
                    self._verify_body(B)
                gc = torch.cuda.CUDAGraph()
                with torch.cuda.graph(gc, pool=pool):
                    self._commit_body(B)
                gd = torch.cuda.CUDAGraph()
                with torch.cuda.graph(gd, pool=pool):
                    self._draft_body(B, aux)
            self.graphs[B] = (gt, gd)
            self.verify_graphs[B] = gv
            self.commit_graphs[B] = gc
            self.chain_graphs[B] = gch
            torch.cuda.synchronize(dev)
            self.device_bytes_by_size[B] = free_before - torch.cuda.mem_get_info(dev)[0]
        torch.cuda.empty_cache()
        self.captured_bytes = torch.cuda.memory_reserved(dev) - before
        self.captured_device_bytes = free_before - torch.cuda.mem_get_info(dev)[0]

    # -- running a step ----------------------------------------------------------------------
    def can_run(self, reqs) -> bool:
        if not (self.enabled and self.graphs and self.runner.target.gdn_backend == self.backend):
            return False
        if not 0 < len(reqs) <= self.sizes[-1]:
            return False
        for sr in reqs:
            if sr.is_prefill_chunk or sr.num_scheduled_tokens != self.L or len(sr.spec_token_ids) != self.k:
                return False
            if any(len(sr.block_ids[g]) > self.W for g in self.attn_gids):
                return False
            if any(len(sr.state_block_ids[s]) < self.L for s in self.state_gids):
                return False
        return True

    def _known_fields(self, reqs) -> dict[str, np.ndarray]:
        """The fields the host knows of a step before its predecessor's results: block tables,
        drafting capacities, state slots (every position saved)."""
        L, W, bs, n = self.L, self.W, self.bs, len(reqs)
        vals = {}
        if self.runner.drafter is not None:
            vals["capacity_tokens"] = np.fromiter((min(map(len, sr.block_ids.values())) * bs for sr in reqs),
                                                  dtype=np.int64, count=n)
        for g in self.attn_gids:
            vals[f"table{g}"] = np.array([[*t, *[0] * (W - len(t))] for t in (sr.block_ids[g] for sr in reqs)],
                                         dtype=np.int64)
        save = np.ones((n, L), dtype=np.int64)
        for s in self.state_gids:
            vals[f"dst{s}"] = np.array([sr.state_block_ids[s][:L] for sr in reqs], dtype=np.int64)
            vals[f"save{s}"] = save
        return vals

    def _acceptance_fields(self, n: int, acceptance) -> dict[str, np.ndarray]:
        """The verify graph's rule inputs for n sequences: nothing (greedy judging, the buffers'
        defaults) without an acceptance model, else modeled 1, its thresholds and n x k draws."""
        if acceptance is None or self.runner.drafter is None:
            return {}
        return {"modeled": np.ones(1, dtype=np.int64),
                "thresholds": np.array(acceptance.thresholds(self.k), dtype=np.int64),
                "draws": acceptance.draws(n, self.k)}

    def _fill_target(self, reqs, acceptance=None) -> None:
        L, bs, n = self.L, self.bs, len(reqs)
        vals = self._known_fields(reqs) | self._acceptance_fields(n, acceptance)
        nc = np.fromiter((sr.num_computed_tokens for sr in reqs), dtype=np.int64, count=n)
        pos = nc[:, None] + np.arange(L)
        ids = np.fromiter(chain.from_iterable(sr.token_ids for sr in reqs), dtype=np.int64, count=n * L)
        vals |= {"ids": np.maximum(ids, 0), "pos": pos.reshape(-1), "seq_lens": nc + L}
        if self.runner.drafter is not None:
            vals["drafts"] = np.array([sr.spec_token_ids for sr in reqs], dtype=np.int64)
        rows = np.arange(n)[:, None]
        for g in self.attn_gids:
            vals[f"blk{g}"] = vals[f"table{g}"][rows, pos // bs].reshape(-1)
            vals[f"row{g}"] = (pos % bs).reshape(-1)
        first = np.fromiter((self.runner.state_index(sr) for sr in reqs), dtype=np.int64, count=n)
        fresh = (nc == 0).astype(np.int64)
        for s in self.state_gids:
            vals |= {f"src{s}": vals[f"dst{s}"][np.arange(n), first], f"fresh{s}": fresh}
        self.meta.fill(vals)

    def _fill_draft(self, reqs, sampled: dict[str, list[int]], accepted: dict[str, int]) -> list[int]:
        """Fills the drafter's buffers; returns the indices of the requests that draft."""
        k, bs, L = self.k, self.bs, self.L
        n = len(reqs)
        q_ids = np.zeros((n, k + 1), dtype=np.int64)
        q_pos = np.zeros((n, k + 1), dtype=np.int64)
        q_seq = np.ones(n, dtype=np.int64)
        q_blk = {g: np.zeros((n, k + 1), dtype=np.int64) for g in self.draft_gids}
        q_row = {g: np.zeros((n, k + 1), dtype=np.int64) for g in self.draft_gids}
        drafting = []
        mask_id = self.runner.drafter.config.mask_token_id
        for b, sr in enumerate(reqs):
            m = accepted[sr.req_id]
            p = sr.num_computed_tokens + L - k + m
            if min(len(t) for t in sr.block_ids.values()) * bs < p + k + 1:
                continue                  # at max_model_len: no room to draft (as the eager runner)
            drafting.append(b)
            q_ids[b] = [sampled[sr.req_id][-1]] + [mask_id] * k
            q_pos[b] = np.arange(p, p + k + 1)
            q_seq[b] = p + k + 1
            for g in self.draft_gids:
                table = sr.block_ids[g]
                q_blk[g][b] = [table[x // bs] for x in q_pos[b]]
                q_row[g][b] = q_pos[b] % bs
        vals = {"q_ids": q_ids.reshape(-1), "q_pos": q_pos.reshape(-1), "q_seq_lens": q_seq}
        for g in self.draft_gids:
            vals |= {f"q_blk{g}": q_blk[g].reshape(-1), f"q_row{g}": q_row[g].reshape(-1)}
        self.dmeta.fill(vals)
        return drafting

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
        n = len(reqs)
        B = next(s for s in self.sizes if s >= n)
        if prev is None:
            self._fill_target(reqs, acceptance)
        else:
            self._fill_chained(reqs, prev, acceptance)
            self.num_chained_steps += 1
        graph_target, graph_draft = self.graphs[B]
        if graph_target is None:
            if prev is not None:
                self._chain_body(B)
            aux = self._target_body(B)
            self._verify_body(B)
            self._commit_body(B)
            self._draft_body(B, aux)
        else:
            if prev is not None:
                self.chain_graphs[B].replay()
            graph_target.replay()
            self.verify_graphs[B].replay()
            self.commit_graphs[B].replay()
            graph_draft.replay()
        return LaunchedStep(reqs, self.tokens.read_async(), prev)

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
            num_drafts = [self.k * int(prev_rows.drafting[row_of[sr.req_id]]) for sr in step.reqs]
            step.prev = None               # its results are read: nothing holds the chain
        for sr, n, m in zip(step.reqs, num_drafts, accepted):
            result.observe_verify(sr.req_id, n, int(m))
        return result

    def _fill_chained(self, reqs, prev: "LaunchedStep", acceptance=None) -> None:
        """What the host knows of a chained step (`_known_fields`, the acceptance model's inputs),
        the optimistic num_computed_tokens and each request's row in `prev`; the rest is
        `_chain_body`'s."""
        n = len(reqs)
        vals = self._known_fields(reqs) | self._acceptance_fields(n, acceptance)
        vals |= {"prev_row": np.fromiter((prev.row_of[sr.req_id] for sr in reqs), dtype=np.int64, count=n),
                 "nc_opt": np.fromiter((sr.num_computed_tokens for sr in reqs), dtype=np.int64, count=n),
                 **{f"fresh{s}": np.zeros(n, dtype=np.int64) for s in self.state_gids}}
        self.meta.fill(vals)

    def _execute_two_syncs(self, reqs, params, generators, acceptance, result):
        """Target graph, host verification (`verify`) and drafter inputs, drafter graph."""
        B = next(s for s in self.sizes if s >= len(reqs))
        L, k = self.L, self.k
        self._fill_target(reqs)
        graph_target, graph_draft = self.graphs[B]
        aux = self._target_body(B) if graph_target is None else graph_target.replay()
        argmax = self.argmax[:len(reqs) * L].tolist()             # the step's sync: sampled tokens
        accepted: dict[str, int] = {}
        for b, sr in enumerate(reqs):
            toks = verify(self.logits[b * L:(b + 1) * L], list(sr.spec_token_ids), params[sr.req_id],
                          generators.get(sr.req_id), acceptance if sr.spec_token_ids else None,
                          argmax=argmax[b * L:(b + 1) * L])
            result.sampled[sr.req_id] = toks
            accepted[sr.req_id] = len(toks) - 1
            result.observe_verify(sr.req_id, sum(1 for d in sr.spec_token_ids if d >= 0), len(toks) - 1)
        if self.runner.drafter is None:
            return result
        m = torch.tensor([accepted[sr.req_id] for sr in reqs], dtype=torch.long)
        self.tokens.accepted[:len(reqs)].copy_(m)                   # the commit's input
        if self.commit_graphs[B] is None:
            self._commit_body(B)
        else:
            self.commit_graphs[B].replay()
        drafting = self._fill_draft(reqs, result.sampled, accepted)
        if graph_draft is None:
            self._draft_body(B, aux)
        else:
            graph_draft.replay()
        draft_ids = self.draft_argmax[:len(reqs) * k].view(len(reqs), k).tolist()
        result.drafts = {reqs[b].req_id: draft_ids[b] for b in drafting}
        return result


class LaunchedStep:
    """A one-sync step enqueued on the device and not yet collected: its requests, the pending
    read of its results, and the step it was chained behind (until collected)."""

    def __init__(self, reqs, pending: PendingRead, prev: "LaunchedStep | None"):
        self.reqs, self.pending, self.prev = list(reqs), pending, prev
        self.row_of = {sr.req_id: b for b, sr in enumerate(self.reqs)}
        self.rows = None                   # StepResultRows, once collected


def _argmax(logits: torch.Tensor, out: torch.Tensor) -> None:
    """out <- logits.argmax(-1): on CUDA the two-stage kernel (model/argmax_kernel.py, the same
    answer: torch.argmax runs one program per row, which leaves most of the chip idle at a few
    hundred rows of 248k columns), else torch's."""
    if logits.is_cuda:
        from engine_under_test.model.argmax_kernel import argmax_rows

        argmax_rows(logits, out)
    else:
        torch.argmax(logits, dim=-1, out=out)
