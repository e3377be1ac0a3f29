#!/usr/bin/env python3
"""A stand-in port of vLLM 0.33 with switchable defects, planned through `plan.command`.

    port.py --defects LIST        (the case JSON on stdin, ONE observation JSON on stdout)

The port is built on the reference engine's planning library (engine_under_test: drafting table,
budget, memory planner, pool, scheduler) and its plan adapter, the way a port reuses an upstream's
pieces; every defect below is a mistake such a port makes, switched on by name from the engine
file's `defects:` (LIST `none` plans like vLLM). The framework never imports this file: it runs it
as a process and judges what it prints, like any other engine's.

Figures are the port's own: a defect changes what the port plans, schedules and reports; where a
defect hides an allocation (draft-kv-hidden) the observation does not list it, as the real port's
logs did not.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PAGE_TOKENS = 16   # the port's draft store is paged in 16-token pages


def _draft_store_bytes_per_request(case: dict[str, Any]) -> int:
    """One store per batch row beside the pool: max_model_len rounded up to a page, plus one page,
    across every draft layer (513 pages x 16 = 8208 tokens at max_model_len 8192)."""
    from engine_under_test.shapes import read_draft_shape

    draft_dir = case["resolved"].get("draft_dir")
    if not draft_dir:
        return 0
    d = read_draft_shape(draft_dir)
    pages = -(-case["scheduler"]["max_model_len"] // PAGE_TOKENS) + 1
    return pages * PAGE_TOKENS * d.num_layers * 2 * d.attention.num_kv_heads * d.attention.head_dim * 2


# --- defects that change what the port plans (applied before planning) ---------------------------

def _table(method: str, slots: Callable[[int], int] | None = None, lookahead: Callable[[int], int] | None = None):
    from engine_under_test import drafting

    s, la, sep = drafting._TABLE[method]
    drafting._TABLE[method] = (slots or s, lookahead or la, sep)


def _no_drafting_reservation() -> None:
    from engine_under_test import drafting

    for method in list(drafting._TABLE):
        _table(method, slots=lambda k: 0)


def _state_slots(fn: Callable[[Any], int]) -> None:
    from engine_under_test import engine_plan
    from engine_under_test.memory import planner

    planner.state_slots_per_sequence = fn
    engine_plan.state_slots_per_sequence = fn


def _no_null_block() -> None:
    from engine_under_test.memory import planner
    from engine_under_test.scheduler import kv_manager

    planner.NUM_NULL_BLOCKS = 0
    original = kv_manager.KVCacheManager.__init__

    def init(self, layout, max_model_len, num_state_slots, num_reserved_blocks=1, *args, **kwargs):
        original(self, layout, max_model_len, num_state_slots, 0, *args, **kwargs)
    kv_manager.KVCacheManager.__init__ = init


def _unaligned_block_size() -> None:
    from engine_under_test.memory import specs

    def unaligned(cfg, target):   # the tokens a state page needs, not a multiple of the kernel block
        if target.gdn is None:
            return cfg.block_size
        state = target.gdn.state_bytes(cfg.num_speculative_tokens, specs.conv_dtype(cfg, target), cfg.mamba_ssm_cache_dtype)
        return max(cfg.block_size, specs.cdiv(state, target.attention.kv_bytes_per_token(cfg.kv_cache_dtype)))
    specs.unified_block_size_tokens = unaligned


def _drop_draft_layers() -> None:
    from engine_under_test.memory import planner

    original = planner.build_layer_specs
    planner.build_layer_specs = lambda cfg, target, draft: original(cfg, target, None)


def _unpadded_state_pages() -> None:
    from engine_under_test.memory import planner

    def per_sequence_cost(cfg, layout):
        totals = {"attention_kv": 0, "recurrent_state": 0, "draft_kv": 0}
        num_blocks = 0
        for g in layout.groups:
            n = planner.blocks_per_sequence(cfg, g)
            num_blocks += n
            page = planner._real_page_bytes(g) if g.is_state else layout.page_size_bytes
            for name in g.layer_names:
                totals[planner.layer_category(name, g)] += n * page
        return planner.PerSequence(attention_kv_bytes=totals["attention_kv"], recurrent_state_bytes=totals["recurrent_state"],
                                   draft_kv_bytes=totals["draft_kv"], state_slots=planner.state_slots_per_sequence(cfg),
                                   num_blocks=num_blocks)
    planner.per_sequence_cost = per_sequence_cost


def _overrun_after_chunked_prefill() -> None:
    from engine_under_test.scheduler.scheduler import Scheduler

    original = Scheduler.schedule

    def schedule(self):
        budget = self.budget
        if getattr(self, "_port_after_chunk", False):   # forgets the chunk's lookahead reservation
            extra = max(budget.lookahead_tokens, 1)
            self.budget = dataclasses.replace(budget, max_num_scheduled_tokens=budget.max_num_scheduled_tokens + extra,
                                              max_num_batched_tokens=budget.max_num_batched_tokens + extra)
        try:
            out = original(self)
        finally:
            self.budget = budget
        self._port_after_chunk = any(r.is_prefill_chunk for r in self.running)
        return out
    Scheduler.schedule = schedule


# --- defects in how the port lays out and reports its memory (applied to its plan) -----------------

def _report_draft_store(obs: dict[str, Any], case: dict[str, Any], listed: bool) -> dict[str, Any]:
    if obs["status"] != "ok":
        return obs
    mem = obs["memory"]
    per_request = _draft_store_bytes_per_request(case)
    mem["per_sequence"]["draft_kv_bytes"] = per_request
    if listed:
        mem["ledger_bytes"]["draft_kv"] = per_request * case["scheduler"]["max_num_seqs"]
        mem["outside_bound"] = sorted(set(mem["outside_bound"]) | {"draft_kv"})
    else:
        mem["ledger_bytes"]["draft_kv"] = 0
    return obs


def _two_pools(obs: dict[str, Any], case: dict[str, Any]) -> dict[str, Any]:
    """Attention and draft KV from the budget (half of it, the port's --num-blocks default); the
    recurrent state (max_num_seqs x (k + 1) slots per GDN layer) from what is left."""
    if obs["status"] != "ok":
        return obs
    mem, k = obs["memory"], case["speculative"]["num_speculative_tokens"]
    bound = mem["bound_bytes"]
    seqs = case["scheduler"]["max_num_seqs"]
    attention_pool = bound // 2
    need = seqs * mem["per_sequence"]["recurrent_state_bytes"]
    left = bound - attention_pool
    if need > left:
        from conformance.documents import observation

        return observation.failed(
            obs["case_id"], obs["engine"]["name"], obs["engine"]["version"], "plan", obs["device"]["profile"], "refused",
            f"To serve {seqs} concurrent sequences, {need / 2**30:.2f} GiB of recurrent (Mamba/GDN) state is needed, "
            f"which is larger than the available {left / 2**30:.2f} GiB. Speculative decoding widens that state to "
            f"{mem['per_sequence']['state_slots']} snapshot slots per sequence (num_speculative_tokens={k} + 1); "
            f"lower max_num_seqs or raise --num-blocks")
    per_seq_attn = mem["per_sequence"]["attention_kv_bytes"] + mem["per_sequence"]["draft_kv_bytes"]
    seats = min(attention_pool // max(per_seq_attn, 1), left // max(mem["per_sequence"]["recurrent_state_bytes"], 1))
    mem["pool"]["unified"] = False
    mem["max_concurrency"] = float(seats)
    share = attention_pool / max(per_seq_attn, 1)
    mem["ledger_bytes"].update({"attention_kv": int(share * mem["per_sequence"]["attention_kv_bytes"]),
                                "draft_kv": int(share * mem["per_sequence"]["draft_kv_bytes"]),
                                "recurrent_state": need, "padding": 0, "unused": 0, "unassigned": 0})
    return obs


def _two_pools_unified_seats(obs: dict[str, Any], case: dict[str, Any]) -> dict[str, Any]:
    """Seats from the unified-page arithmetic, allocation in two pools: every block gets attention
    pages for every attention layer, and the state pool is sized for the seats on top."""
    if obs["status"] != "ok":
        return obs
    mem = obs["memory"]
    pool = mem["pool"]
    blocks, page = pool["num_blocks"], pool["page_size_bytes"]
    seats = min(case["scheduler"]["max_num_seqs"], int(mem["max_concurrency"]))
    per = mem["per_sequence"]
    bps = max(per.get("blocks_per_sequence") or 1, 1)
    attn_layers = round(per["attention_kv_bytes"] / max(page * bps, 1)) if page else 0
    draft_layers = round(per["draft_kv_bytes"] / max(page * bps, 1)) if page else 0
    pool["unified"] = False
    mem["ledger_bytes"].update({"attention_kv": blocks * page * attn_layers, "draft_kv": blocks * page * draft_layers,
                                "recurrent_state": seats * per["recurrent_state_bytes"], "padding": 0, "unused": 0,
                                "unassigned": 0})
    return obs


def _unreported(section: str, names: tuple[str, ...] | None = None):
    """The port prints no figure for these fields (its log has no line for them): null in the observation."""
    def change(obs: dict[str, Any], case: dict[str, Any]) -> dict[str, Any]:
        if obs["status"] != "ok":
            return obs
        *parents, leaf = section.split(".")
        node = obs
        for p in parents:
            node = node[p]
        target = node[leaf]
        for name in names or tuple(target):
            target[name] = None
        return obs
    return change


# name -> (what a port developer would call it, change before planning, change to the plan)
DEFECTS: dict[str, tuple[str, Callable[[], None] | None, Callable[..., dict[str, Any]] | None]] = {
    "draft-kv-outside-bound": ("one draft KV store per batch row beside the pool, listed as outside the bound",
                               _drop_draft_layers, lambda o, c: _report_draft_store(o, c, listed=True)),
    "draft-kv-hidden": ("the same draft KV store beside the pool, not reported in the ledger at all",
                        _drop_draft_layers, lambda o, c: _report_draft_store(o, c, listed=False)),
    "two-pools": ("attention + draft KV bounded by --num-blocks, recurrent state from what is left", None, _two_pools),
    "two-pools-unified-seats": ("seats from the unified-page arithmetic while the allocation is two pools", None,
                                _two_pools_unified_seats),
    "no-drafting-reservation": ("no per-request drafting slots in the step budget, for any method",
                                _no_drafting_reservation, None),
    "state-slots-k": ("k state slots per sequence instead of k + 1",
                      lambda: _state_slots(lambda cfg: (2 if cfg.mamba_cache_mode == "align" else 1) + cfg.num_speculative_tokens - 1),
                      None),
    "prefix-caching-state-slots": ("prefix caching ignored in the state-slot count (1 + k in align mode too)",
                                   lambda: _state_slots(lambda cfg: 1 + cfg.num_speculative_tokens), None),
    "dflash-lookahead-k": ("DFlash lookahead k instead of k + 1", lambda: _table("dflash", lookahead=lambda k: k), None),
    "p-eagle-k-slots": ("p-eagle reserves K drafting slots instead of K - 1",
                        lambda: _table("p-eagle", slots=lambda k: k), None),
    "pard-as-draft-model": ("pard treated as draft_model: 1 drafting slot instead of K",
                            lambda: _table("pard", slots=lambda k: 1), None),
    "no-null-block": ("no reserved null block: block 0 is handed out like any other", _no_null_block, None),
    "unaligned-block-size": ("the attention block size is not aligned to the attention backend's kernel block",
                             _unaligned_block_size, None),
    "unpadded-state-pages": ("the padding of the mamba state page is not counted in a sequence's cost",
                             _unpadded_state_pages, None),
    "overrun-after-chunked-prefill": ("the step after a chunked prefill forgets the chunk's lookahead reservation",
                                      _overrun_after_chunked_prefill, None),
    "unreported-ledger": ("the pool's attention, state and draft bytes are not reported (null in the ledger)", None,
                          _unreported("memory.ledger_bytes", ("attention_kv", "recurrent_state", "draft_kv"))),
    "unreported-budget": ("no budget figure is reported (every budget field null)", None, _unreported("budget")),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--defects", default="none", help=f"comma list of: {', '.join(DEFECTS)} (or none)")
    args = ap.parse_args(argv)
    names = [] if args.defects in ("", "none") else args.defects.split(",")
    unknown = [n for n in names if n not in DEFECTS]
    if unknown:
        print(f"port: unknown defect(s) {', '.join(unknown)} (known: {', '.join(DEFECTS)})", file=sys.stderr)
        return 2
    case = json.load(sys.stdin)
    for n in names:
        before = DEFECTS[n][1]
        if before:
            before()
    from conformance.adapters.reference import plan as reference_plan

    obs = reference_plan.plan(case)
    for n in names:
        after = DEFECTS[n][2]
        if after:
            obs = after(obs, case)
    obs["engine"] = {"name": "defective-port", "version": "0.1.0"}
    obs["provenance"]["glue"] = list(obs["provenance"].get("glue") or []) + [
        {"name": f"defect:{n}", "description": DEFECTS[n][0]} for n in names]
    json.dump(obs, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
