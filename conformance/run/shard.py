"""Which shard of the (engine, case, device) matrix a cell belongs to: one function for both faces.

Contract: `parse_shard("i/n")` gives a `Shard` (1 <= i <= n) or raises `ConformanceError` naming the
value (exit 2); `Shard.holds(engine, case_id, device)` says whether the cell is this shard's. The
rule is a stable hash, independent of what else is selected, of the machine, the Python process and
the order of the matrix:

    shard index = int(sha256("<engine>\\0<case>\\0<device>")[:16], 16) % n + 1

so `pytest suites/ --shard i/n` and `conformance run --shard i/n` hold exactly the same cells, and
every cell lies in exactly one shard of n. A case that a cross-case check reads beside another
(`CheckSpec.partner`: seed-draft-kv-c32 beside seed-draft-kv-c8) is hashed under the case that names
it, so the pair always lands in one shard and the cross-case check sees both.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from conformance.errors import ConformanceError

_SHARD = re.compile(r"(\d+)/(\d+)")


def _partner_roots() -> dict[str, str]:
    from conformance.checks.check_table import CHECKS

    return {c.partner: c.case_globs[0] for c in CHECKS if c.partner}


def shard_index(engine: str, case_id: str, device: str, num_shards: int) -> int:
    """The 1-based shard of the cell (engine, case, device) among `num_shards`."""
    root = _partner_roots().get(case_id, case_id)
    digest = hashlib.sha256("\0".join((engine, root, device)).encode("utf-8")).hexdigest()
    return int(digest[:16], 16) % num_shards + 1


@dataclass(frozen=True)
class Shard:
    index: int        # 1-based
    count: int

    def holds(self, engine: str, case_id: str, device: str) -> bool:
        return shard_index(engine, case_id, device, self.count) == self.index

    def text(self) -> str:
        return f"{self.index}/{self.count}"

    def to_json(self) -> dict[str, int]:
        return {"index": self.index, "count": self.count}


def parse_shard(value: str | None) -> Shard | None:
    """`--shard i/n` (1 <= i <= n); None for no value. A bad value raises ConformanceError (exit 2)."""
    if value is None:
        return None
    m = _SHARD.fullmatch(value.strip())
    if not m:
        raise ConformanceError(f"--shard {value!r}: expected i/n, the i-th of n shards (e.g. 1/4)")
    index, count = int(m.group(1)), int(m.group(2))
    if count < 1:
        raise ConformanceError(f"--shard {value!r}: the number of shards must be at least 1")
    if not 1 <= index <= count:
        raise ConformanceError(f"--shard {value!r}: the shard index must be between 1 and {count}")
    return Shard(index, count)
