"""Throughput judged against its golden, within noise bands: pure functions, no I/O.

Contract:
- `throughput_view(obs)` -> the golden document of a reference throughput observation (run
  mode): the card and versions it ran on, the plan, and per rung the figures judged
  (`output_tok_per_s`, `ttft_ms_p50`, `tpot_ms_p50`, `itl_ms_p50`, `mean_acceptance_length`).
- `judge(golden, live, bands=BANDS)` -> `Verdict(status, message)`: status "pass" when each figure of
  every rung both ran is inside its band (golden rungs the live run skipped are listed; none in
  common fails); "fail" otherwise
  (the message names each rung and figure outside, with both values and the limit);
  "not_comparable" when the two ran on different kinds of card: such a run is compared only as
  ratios measured in the same run (reference / transformers peer), never against another card's
  golden. `Verdict.passed` is True only for "pass".

The bands (`Bands`) and their justification from measured run-to-run noise are in
suites/throughput/README.md; a band is a ratio to the golden, the same at every rung.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

GOLDEN_KIND = "throughput-golden"
GOLDEN_VERSION = 1


@dataclass(frozen=True)
class Bands:
    min_tok_per_s_ratio: float = 0.75        # live output tok/s >= this x golden
    max_ttft_ratio: float = 1.75             # live TTFT p50 <= this x golden
    max_tpot_ratio: float = 1.35             # live TPOT p50 <= this x golden
    max_itl_ratio: float = 1.5               # live ITL p50 <= this x golden
    acceptance_length_tolerance: float = 0.25


BANDS = Bands()


class Verdict(NamedTuple):
    status: Literal["pass", "fail", "not_comparable"]
    message: str

    @property
    def passed(self) -> bool:
        return self.status == "pass"


def card_kind(hardware: str) -> str:
    """'one NVIDIA H200 (139.8 GiB) [GPU-...], driver ..' -> 'NVIDIA H200 (139.8 GiB)': the card,
    without its serial or the software versions."""
    kind = re.split(r" \[GPU-|, driver |, torch ", hardware)[0]
    return re.sub(r"^(one|\d+ x) ", "", kind).strip()


def throughput_view(obs: dict[str, Any]) -> dict[str, Any]:
    t = obs["throughput"]
    rungs = []
    for r in t["rungs"]:
        rungs.append({"concurrency": r["concurrency"], "output_tok_per_s": r["output_tok_per_s"],
                      "ttft_ms_p50": r["ttft_ms"]["median"], "tpot_ms_p50": r["tpot_ms"]["median"],
                      "itl_ms_p50": r["itl_ms"]["median"], "mean_acceptance_length": r.get("mean_acceptance_length")})
    return {"kind": GOLDEN_KIND, "version": GOLDEN_VERSION, "case_id": obs["case_id"],
            "engine": obs["engine"], "hardware": obs["device"]["hardware"], "card": card_kind(obs["device"]["hardware"]),
            "plan": {k: t.get("workload", {}).get(k) for k in ("prompt_tokens", "output_tokens")}, "rungs": rungs}


def _outside(name: str, live: float, golden: float, ratio: float, upper: bool) -> str | None:
    limit = golden * ratio
    bad = live > limit if upper else live < limit
    if not bad:
        return None
    return (f"{name} {live:.4g} {'>' if upper else '<'} {limit:.4g} "
            f"({ratio:g} x golden {golden:.4g}; live / golden = {live / golden:.2f})")


def judge(golden: dict[str, Any], live: dict[str, Any], bands: Bands = BANDS) -> Verdict:
    for doc, which in ((golden, "golden"), (live, "live")):
        if doc.get("kind") != GOLDEN_KIND or doc.get("version") != GOLDEN_VERSION:
            return Verdict("fail", f"{which}: not a throughput golden view of version {GOLDEN_VERSION}")
    if golden["card"] != live["card"]:
        return Verdict("not_comparable", f"live ran on {live['card']!r}, the golden on {golden['card']!r}: "
                                         "compare the ratios measured in the same run instead")
    live_by_c = {r["concurrency"]: r for r in live["rungs"]}
    problems, lines, missing = [], [], []
    for g in golden["rungs"]:
        c = g["concurrency"]
        r = live_by_c.get(c)
        if r is None:
            missing.append(c)
            continue
        outs = [_outside("output tok/s", r["output_tok_per_s"], g["output_tok_per_s"], bands.min_tok_per_s_ratio, False),
                _outside("TTFT p50 ms", r["ttft_ms_p50"], g["ttft_ms_p50"], bands.max_ttft_ratio, True),
                _outside("TPOT p50 ms", r["tpot_ms_p50"], g["tpot_ms_p50"], bands.max_tpot_ratio, True),
                _outside("ITL p50 ms", r["itl_ms_p50"], g["itl_ms_p50"], bands.max_itl_ratio, True)]
        ga, la = g.get("mean_acceptance_length"), r.get("mean_acceptance_length")
        if ga is not None and (la is None or abs(la - ga) > bands.acceptance_length_tolerance):
            outs.append(f"mean acceptance length {la} vs golden {ga} (+- {bands.acceptance_length_tolerance})")
        problems += [f"c={c}: {o}" for o in outs if o]
        lines.append(f"c={c}: {r['output_tok_per_s']:.1f} tok/s ({r['output_tok_per_s'] / g['output_tok_per_s']:.2f} x golden), "
                     f"TTFT {r['ttft_ms_p50']:.1f} ms ({r['ttft_ms_p50'] / g['ttft_ms_p50']:.2f} x), "
                     f"TPOT {r['tpot_ms_p50']:.2f} ms ({r['tpot_ms_p50'] / g['tpot_ms_p50']:.2f} x)")
    if len(missing) == len(golden["rungs"]):
        return Verdict("fail", f"no rung of the golden ({', '.join(str(c) for c in missing)}) ran live")
    if missing:
        lines.append(f"not run live: c={', '.join(str(c) for c in missing)}")
    versions = "" if golden["hardware"] == live["hardware"] else \
        f" (golden on {golden['hardware']!r}, live on {live['hardware']!r})"
    if problems:
        return Verdict("fail", f"{len(problems)} figure(s) outside the bands{versions}: " + "; ".join(problems))
    return Verdict("pass", f"every rung inside the bands{versions}: " + "; ".join(lines))
