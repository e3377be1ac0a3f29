"""A figure's series across commits and its change points, by the live parity checks' statistics.

Contract: `series_of(samples)` groups stored samples into `Series` per (engine, case, device, figure),
commits in the order their first run started, each commit with every sample of every run at it.
`change_points(series)` walks the commits: each commit's samples are compared with the pooled samples
of the commits since the last change point, as the live checks compare two engines
(`checks.intervals.ratio_interval`: the ratio of geometric means, a 95% Welch-t interval on the logs),
and the interval judged against the figure's noise band with `checks.intervals.judge_ratio`:

    band [1/L, L] for an upper limit L (less is better), [L, 1/L] for a lower one (more is better)
    a change point  the interval lies wholly above the band's top or wholly below its bottom
                    (a `regression` where the figure moved the bad way, else an `improvement`)
    otherwise       no change: an interval that straddles a limit is noise, never a change

Exact (plan) figures have L = 1: every run at a commit gives the same value, so two runs a side give an
exact interval and any move is a change; one run a side has no spread, its interval is unbounded
(`ratio_interval`) and never a change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from conformance.checks.intervals import FAIL, RatioInterval, judge_ratio, ratio_interval
from conformance.nightly.history_store import Sample


@dataclass(frozen=True)
class Point:
    commit: str
    samples: tuple[float, ...]

    @property
    def geomean(self) -> float:
        return math.exp(sum(map(math.log, self.samples)) / len(self.samples))


@dataclass(frozen=True)
class Series:
    engine: str
    case_id: str
    device: str
    figure: str
    limit: float
    upper: bool
    points: tuple[Point, ...]

    def label(self) -> str:
        return f"{self.engine} · {self.case_id} · {self.device} · {self.figure}"

    def band(self) -> tuple[float, float]:
        lo, hi = (1 / self.limit, self.limit) if self.upper else (self.limit, 1 / self.limit)
        return min(lo, hi), max(lo, hi)


@dataclass(frozen=True)
class Change:
    commit: str
    index: int                  # the commit's place in the series
    since: str                  # the first commit of the segment it is compared with
    interval: RatioInterval
    kind: str                   # regression | improvement


def series_of(samples: Iterable[Sample]) -> list[Series]:
    grouped: dict[tuple, dict[str, list[float]]] = {}
    bands: dict[tuple, tuple[float, bool]] = {}
    for s in samples:   # ordered by the run's start: a commit takes the place of its first run
        key = (s.engine, s.case_id, s.device, s.figure)
        grouped.setdefault(key, {}).setdefault(s.commit, []).append(s.value)
        bands[key] = (s.limit_ratio, s.upper)
    return [Series(*key, *bands[key], tuple(Point(c, tuple(v)) for c, v in commits.items()))
            for key, commits in sorted(grouped.items())]


def change_points(series: Series) -> list[Change]:
    lo, hi = series.band()
    changes, start = [], 0
    for k in range(1, len(series.points)):
        before = [x for p in series.points[start:k] for x in p.samples]
        interval = ratio_interval(series.points[k].samples, before)
        if interval is None:
            continue
        up = judge_ratio(interval, hi, upper=True) == FAIL        # wholly above the band
        down = judge_ratio(interval, lo, upper=False) == FAIL     # wholly below it
        if up or down:
            worse = up if series.upper else down
            changes.append(Change(series.points[k].commit, k, series.points[start].commit, interval,
                                  "regression" if worse else "improvement"))
            start = k
    return changes
