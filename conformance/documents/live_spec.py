"""A case's `live:` section with its defaults: the ladder to serve and the bands the live checks use.

Contract: `live_spec(case_spec)` returns a `LiveSpec`, or None for a case that is not run live (no
`live:` section). Defaults, where the case says nothing:

    num_repeats 3, num_warmup_waves 1, min_requests_per_slot 1, device cuda
    parity      (same run, same card, engine / oracle)   tok/s >= 0.9 x, TTFT p50 <= 1.25 x,
                                                          TPOT p50 <= 1.15 x, ITL p50 <= 1.15 x
    regression  (an engine against its own live golden)  tok/s >= 0.6 x, TTFT p50 <= 3 x,
                                                          TPOT p50 <= 2 x, ITL p50 <= 2 x
    acceptance  mean length +- 0.1, each position's rate +- 0.05

The regression band is the wider: a golden was recorded in another run, often on another machine of
the profile, and the same code of the reference moved between three H200 machines by up to 0.70 x in
tok/s (c = 1, the interval's upper end 0.80), 2.33 x in TTFT (c = 2: 36 ms against 73 - 85 ms, which
engine step a first token joins), 1.61 x in TPOT (c = 2: 0.76 against 1.24 ms) and 1.3 x in ITL
(suites/results/live/h200/README.md): its serving is host-bound at low concurrency, and hosts differ.
Each limit sits outside the worst move seen, so an engine that is not slower than on the golden's machine
never fails; a regression smaller than a machine's spread is caught only by ratios measured in one run
(the parity band, against vLLM served in the same run on the same card).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from conformance.loadgen import LoadgenSettings

if TYPE_CHECKING:
    from conformance.documents.cases import Case


@dataclass(frozen=True)
class Band:
    min_output_tok_per_s_ratio: float
    max_ttft_ratio: float
    max_tpot_ratio: float
    max_itl_ratio: float

    def merged(self, overrides: Mapping[str, float] | None) -> "Band":
        return Band(**{**self.__dict__, **dict(overrides or {})})

    # (figure, key in a rung's per-wave samples, limit, upper): what a band judges, in order
    def limits(self) -> tuple[tuple[str, str, float, bool], ...]:
        return (("output tok/s", "output_tok_per_s", self.min_output_tok_per_s_ratio, False),
                ("TTFT p50", "ttft_ms_p50", self.max_ttft_ratio, True),
                ("TPOT p50", "tpot_ms_p50", self.max_tpot_ratio, True),
                ("ITL p50", "itl_ms_p50", self.max_itl_ratio, True))


PARITY = Band(0.9, 1.25, 1.15, 1.15)
REGRESSION = Band(0.6, 3.0, 2.0, 2.0)


@dataclass(frozen=True)
class LiveSpec:
    concurrencies: tuple[int, ...]
    device: str = "cuda"
    num_repeats: int = 3
    num_warmup_waves: int = 1
    min_requests_per_slot: int = 1
    request_timeout_s: float = 300.0
    parity: Band = PARITY
    regression: Band = REGRESSION
    acceptance_mean_tolerance: float = 0.1
    acceptance_per_position_tolerance: float = 0.05

    def loadgen_settings(self) -> LoadgenSettings:
        return LoadgenSettings(concurrencies=self.concurrencies, num_repeats=self.num_repeats,
                               num_warmup_waves=self.num_warmup_waves, min_requests_per_slot=self.min_requests_per_slot,
                               request_timeout_s=self.request_timeout_s)


def live_spec(case_spec: Mapping[str, Any]) -> LiveSpec | None:
    live = case_spec.get("live")
    if not live:
        return None
    tol = live.get("acceptance_tolerance") or {}
    return LiveSpec(concurrencies=tuple(int(c) for c in live["concurrencies"]), device=live.get("device", "cuda"),
                    num_repeats=int(live.get("num_repeats", 3)), num_warmup_waves=int(live.get("num_warmup_waves", 1)),
                    min_requests_per_slot=int(live.get("min_requests_per_slot", 1)),
                    request_timeout_s=float(live.get("request_timeout_s", 300.0)),
                    parity=PARITY.merged(live.get("parity")), regression=REGRESSION.merged(live.get("regression")),
                    acceptance_mean_tolerance=float(tol.get("mean_length", 0.1)),
                    acceptance_per_position_tolerance=float(tol.get("per_position", 0.05)))


def parse_ladder(text: str, where: str) -> tuple[int, ...]:
    """'1,8,32' -> (1, 8, 32): increasing concurrencies >= 1; ValueError naming `where` otherwise."""
    try:
        ladder = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        ladder = ()
    if not ladder or min(ladder) < 1 or list(ladder) != sorted(set(ladder)):
        raise ValueError(f"{where} {text!r}: give increasing concurrencies >= 1 separated by commas, e.g. 1,8,32")
    return ladder


def with_ladder(case: "Case", ladder: tuple[int, ...] | None) -> "Case":
    """`case` served on `ladder` instead of its own `live.concurrencies` (both faces' `--live-ladder`);
    the case itself when `ladder` is None or the case is not run live. Its id stays: the golden of a case
    is per rung, and a rung of the golden that this run did not serve is not compared."""
    if ladder is None or not case.spec.get("live"):
        return case
    spec = copy.deepcopy(case.spec)
    spec["live"]["concurrencies"] = list(ladder)
    return dataclasses.replace(case, spec=spec)
