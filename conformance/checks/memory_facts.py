"""What an observation's memory section says, read the way the memory checks need it.

Contract (pure functions of observation-shaped documents; nothing here reads a file):
- `draft_kv_location(obs, case_spec)`: where a speculative method's draft KV lives by the engine's own
  figures: `outside` (listed in `memory.outside_bound`), `pool` (the ledger itemizes the pool's stores,
  draft KV among them, so a store kept beside the pool shows as the ledger passing the bound), `unknown`
  (a DFlash plan that does not say: no bound check may pass on it), or `none` (no draft KV to place).
- `pool_differences(obs, vllm)`: why a sequence costs other than in vLLM, sorted into `accounting`
  differences (a store vLLM counts that the engine's ledger or per-sequence cost leaves out, or keeps
  outside the bound) and `layout` differences (block size, Mamba page padding, KV-cache group padding:
  each with vLLM's figure and the vLLM function that decides it, both read from vLLM's document: its
  `memory` section and `provenance`, never from here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conformance.documents import units

STORES = ("attention_kv", "recurrent_state", "draft_kv")   # what a sequence needs from the pool
# Ledger categories a KV-bytes bound does not cover (a gpu_memory_utilization bound covers them).
NOT_UNDER_KV_BOUND = ("weights", "activations", "workspace", "cuda_context", "cuda_graphs")
# Methods whose drafter keeps KV of its own per sequence (the false pass was DFlash's).
DRAFT_KV_METHODS = frozenset({"dflash"})
OUTSIDE, POOL, UNKNOWN, NONE = "outside", "pool", "unknown", "none"


def _n(x: Any) -> str:
    return f"{x:,}" if isinstance(x, int) and not isinstance(x, bool) else repr(x)


def draft_kv_location(obs: dict[str, Any], case_spec: dict[str, Any]) -> tuple[str, str]:
    """(where, why). `pool` needs the ledger to name draft KV and the pool's attention KV beside it
    (so the categories under the bound are itemized: a store beside the pool makes them sum past the
    bound); a per-request figure alone says nothing of where the bytes are."""
    mem = obs.get("memory") or {}
    ledger = mem.get("ledger_bytes") or {}
    if "draft_kv" in (mem.get("outside_bound") or ()):
        return OUTSIDE, f"memory.outside_bound lists draft_kv ({units.human_bytes(ledger.get('draft_kv'))})"
    method = ((case_spec.get("speculative") or {}).get("method"))
    if method not in DRAFT_KV_METHODS:
        return NONE, f"method {method!r} keeps no draft KV the memory checks place"
    draft, attention = ledger.get("draft_kv"), ledger.get("attention_kv")
    per_seq = (mem.get("per_sequence") or {}).get("draft_kv_bytes")
    if isinstance(draft, int) and draft > 0 and isinstance(attention, int) and attention > 0:
        return POOL, f"memory.ledger_bytes itemizes the pool: draft_kv {_n(draft)} B beside attention_kv {_n(attention)} B"
    return UNKNOWN, (f"the plan does not say where its draft KV lives: memory.ledger_bytes.draft_kv {_n(draft)}, "
                     f"attention_kv {_n(attention)}, memory.per_sequence.draft_kv_bytes {_n(per_seq)}, and "
                     f"memory.outside_bound does not list draft_kv; a {method} plan must either list draft_kv in "
                     f"memory.outside_bound (a store beside the pool) or itemize the pool's ledger with it "
                     f"(for a plan.log engine: a `lists` rule for the line that says the store is outside the "
                     f"bound, or fields for memory.ledger_bytes.attention_kv and .draft_kv)")


@dataclass(frozen=True)
class PoolDifferences:
    accounting: tuple[str, ...]
    layout: tuple[str, ...]

    @property
    def kind(self) -> str | None:
        """`accounting` wins: a store left out explains a difference whatever the layout."""
        return "accounting" if self.accounting else ("layout" if self.layout else None)

    def lines(self) -> tuple[str, ...]:
        return (tuple(f"accounting difference: {a}" for a in self.accounting)
                + tuple(f"layout difference: {a}" for a in self.layout))

    def summary(self) -> str:
        if self.accounting:
            return (f"an accounting difference (a store not counted where vLLM counts it): {self.accounting[0]}"
                    + (f" (+{len(self.accounting) - 1} more)" if len(self.accounting) > 1 else ""))
        if self.layout:
            return (f"a layout difference, nothing uncounted: {'; '.join(self.layout)}")
        return ""


def _override(vllm: dict[str, Any], fragment: str) -> tuple[dict[str, Any] | None, int]:
    for i, o in enumerate((vllm.get("provenance") or {}).get("overrides") or ()):
        if fragment in str(o.get("name")):
            return o, i
    return None, -1


def _functions_named(vllm: dict[str, Any], text: str) -> list[str]:
    """vLLM's provenance functions whose own name (the last dotted part) `text` mentions."""
    return [f for f in (vllm.get("provenance") or {}).get("functions") or () if f.rsplit(".", 1)[-1] in text]


def _decided_by(vllm: dict[str, Any], fragment: str) -> tuple[Any, str]:
    """(value, the vLLM functions that set it) of the provenance override whose name holds `fragment`;
    an override whose reason names no function ("set by the same alignment") takes those of the
    override recorded before it."""
    o, i = _override(vllm, fragment)
    if o is None:
        return None, "not in vLLM's provenance"
    funcs = _functions_named(vllm, str(o.get("reason", "")))
    overrides = (vllm.get("provenance") or {}).get("overrides") or ()
    while not funcs and i > 0:
        i -= 1
        funcs = _functions_named(vllm, str(overrides[i].get("reason", "")))
    return o.get("value"), (", ".join(funcs) or f"provenance override {o.get('name')}: {o.get('reason')}")


def _group_padding(vllm: dict[str, Any]) -> tuple[int, int, int, str] | None:
    """(unused bytes, widest group's layers, narrowest, deciding functions) where vLLM pads groups."""
    mem = vllm.get("memory") or {}
    unused = (mem.get("ledger_bytes") or {}).get("unused") or 0
    groups = (mem.get("pool") or {}).get("groups") or []
    widths = [g.get("num_layers") for g in groups if isinstance(g.get("num_layers"), int)]
    if not unused or not widths or min(widths) == max(widths):
        return None
    funcs = [f for f in (vllm.get("provenance") or {}).get("functions") or () if "kv_cache_groups" in f]
    return unused, max(widths), min(widths), ", ".join(funcs) or "vLLM's KV cache grouping (provenance names none)"


def pool_differences(obs: dict[str, Any], vllm: dict[str, Any]) -> PoolDifferences:
    """Accounting and layout differences of the engine's memory plan from vLLM's (see the module doc)."""
    mine, theirs = obs.get("memory") or {}, vllm.get("memory") or {}
    my_ledger, my_per = mine.get("ledger_bytes") or {}, mine.get("per_sequence") or {}
    their_per = theirs.get("per_sequence") or {}
    outside = set(mine.get("outside_bound") or ())
    accounting: list[str] = []
    for store in STORES:
        want = their_per.get(f"{store}_bytes")
        if not want:
            continue
        if store in outside:
            accounting.append(f"{store} lies outside the bound (memory.outside_bound), where vLLM keeps a sequence's "
                              f"{_n(want)} B of it in the pool")
        elif not my_per.get(f"{store}_bytes"):
            accounting.append(f"a sequence's {store} is not counted (memory.per_sequence.{store}_bytes "
                              f"{_n(my_per.get(f'{store}_bytes'))}; vLLM {_n(want)} B)")
        elif not my_ledger.get(store):
            accounting.append(f"{store} is not in the ledger (memory.ledger_bytes.{store} {_n(my_ledger.get(store))}; "
                              f"vLLM counts {_n(want)} B per sequence in its pool)")
    layout: list[str] = []
    my_pool, their_pool = mine.get("pool") or {}, theirs.get("pool") or {}
    block, block_funcs = _decided_by(vllm, "cache_config.block_size")
    block = their_pool.get("block_size_tokens", block)
    if block is not None and my_pool.get("block_size_tokens") not in (None, block):
        layout.append(f"attention block {_n(my_pool.get('block_size_tokens'))} tokens where vLLM's is {_n(block)} "
                      f"(memory.pool.block_size_tokens; vLLM raises the hybrid block to hold a whole state page: "
                      f"{block_funcs})")
    padded, page_funcs = _decided_by(vllm, "mamba_page_size_padded")
    page = padded[-1] if isinstance(padded, list) and padded else None
    if page is not None and my_pool.get("page_size_bytes") not in (None, page):
        layout.append(f"page {_n(my_pool.get('page_size_bytes'))} B where vLLM pads the Mamba page to {_n(page)} B "
                      f"(memory.pool.page_size_bytes; mamba_page_size_padded, set by {page_funcs})")
    groups = _group_padding(vllm)
    if groups is not None and not (my_ledger.get("unused") or 0):
        unused, widest, narrowest, funcs = groups
        layout.append(f"no KV-cache group padding where vLLM pads groups of {narrowest} layers to the widest group's "
                      f"{widest} layer slots per block ({_n(unused)} B, {units.human_bytes(unused)} of its pool: "
                      f"memory.ledger_bytes.unused; {funcs})")
    return PoolDifferences(tuple(accounting), tuple(layout))
