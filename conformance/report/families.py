"""Check families: which of the seed bugs a failing check points at, for the overview's cells.

Contract: `family_of(check)` is the family of a check name: one of `FAMILIES` (`bound`, `pools`,
`reservation`, `trace`, `live`, `golden`, `refused`), a check the table does not list here falling back
to its suite (`budget`, `memory`, ...), so no failure is unlabelled. The live rows read as the property
they measure: device memory over the bound is `bound`, sequences not served concurrently `pools`,
acceptance, throughput and a run unlike its plan `live`. `cell_families(verdicts)` lists the
families of a cell's failed verdicts, the most telling first (`FAMILY_ORDER`): a cell that fails a
bound check and the seat comparison it causes reads "bound", then "pools". On a refused observation
the budget and trace comparisons can say only that the engine refused where the oracle plans: they
read `refused` (the memory checks keep their family: a refusal for want of seats is a pool's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from conformance.checks.verdicts import Verdict


@dataclass(frozen=True)
class Family:
    name: str
    title: str                       # what it means, with the seed bug it catches
    checks: tuple[str, ...]


FAMILIES: tuple[Family, ...] = (
    Family("bound", "seed bug 1: memory outside the operator's bound (draft KV beside the pool)",
           ("memory.inside_bound", "memory.ledger_holds_seats", "memory.draft_kv_scaling",
            "live.device_memory_within_bound")),
    Family("pools", "seed bug 2: pools and seats unlike vLLM's one unified pool (seats, per-sequence costs)",
           ("memory.unified_pool_seats", "memory.seats_equal_vllm", "memory.per_sequence_equals_vllm",
            "memory.explains_short_seats", "budget.active_seqs_not_below_sglang", "live.concurrency_served")),
    Family("reservation", "seed bug 3: budgets and drafting-slot reservation unlike vLLM's",
           ("budget.parity_with_vllm", "trace.steps_within_budget")),
    Family("trace", "per-step scheduled tokens unlike vLLM's", ("trace.equals_vllm",)),
    Family("live", "served live unlike vLLM (acceptance length, throughput) or unlike its own plan",
           ("live.acceptance_equals_vllm", "live.throughput_parity_vllm", "live.plan_matches_run")),
    Family("golden", "an engine moved from its own golden (an oracle: upstream moved)",
           ("budget.golden", "memory.golden", "trace.golden", "live.golden")),
    Family("refused", "the engine refused the case where the oracle plans it (its message says why)", ()),
)
REFUSAL_MASKS = ("reservation", "trace")   # on a refused observation these compare nothing but the status
FAMILY_ORDER = tuple(f.name for f in FAMILIES)
_BY_CHECK = {c: f.name for f in FAMILIES for c in f.checks}


def family_of(check: str) -> str:
    if check in _BY_CHECK:
        return _BY_CHECK[check]
    return "golden" if check.endswith(".golden") else check.split(".", 1)[0]


def cell_families(verdicts: Iterable[Verdict], status: str | None = None) -> list[str]:
    """`status`: the cell's observation status (`refused` folds the budget and trace comparisons)."""
    found = {family_of(v.check) for v in verdicts if v.failed}
    if status == "refused" and found & set(REFUSAL_MASKS):
        found = (found - set(REFUSAL_MASKS)) | {"refused"}
    rank = {name: i for i, name in enumerate(FAMILY_ORDER)}
    return sorted(found, key=lambda n: (rank.get(n, len(rank)), n))
