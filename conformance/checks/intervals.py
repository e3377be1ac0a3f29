"""Ratios of repeated measurements with a confidence interval, and a verdict that can say "inconclusive".

Contract: `ratio_interval(a, b)` compares two sets of repeated measurements of one figure (each wave
of a rung gives one: output tok/s, or that wave's median TTFT) as the ratio of their geometric means,
a / b, with a two-sided 95% interval from Welch's t on the logarithms (the figures are positive and
their noise multiplicative). One wave per side gives no spread: the interval is then unbounded and
every judgement of it inconclusive, never a pass or a fail on one sample.

`ratio_over_runs(ratios)` takes one such ratio from each of several runs (each measured in one run on one
card, say vLLM and an engine in the same run) and gives their geometric mean with a 95% interval from
Student's t over the runs: the run is the unit, so what moves from one run or machine to the next (an
engine's start, the host) widens the interval, as the waves of one run cannot show. One run: unbounded.

`judge_ratio(interval, limit, upper)` says where the interval lies against a band's limit:

    lower limit (more is better, e.g. tok/s >= 0.9 x):   lo >= limit -> pass, hi < limit -> fail
    upper limit (less is better, e.g. TPOT <= 1.15 x):   hi <= limit -> pass, lo > limit -> fail
    otherwise (the interval straddles the limit)          -> inconclusive

so noise alone (a wide interval) can only make a verdict inconclusive, never a fail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
CONFIDENCE = 0.95

# Student's t, two-sided 95% (the 0.975 quantile), by degrees of freedom 1..30; past 30 the table is
# interpolated in 1/df towards the normal quantile 1.959964 (error below 1e-3).
_T975 = (12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157, 2.228139,
         2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963,
         2.079614, 2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272)
_Z975 = 1.959964


def t975(df: float) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom (df >= 1; fractional df interpolate)."""
    if df < 1:
        raise ValueError(f"degrees of freedom {df} < 1")
    if df >= 30:
        return _Z975 + (_T975[29] - _Z975) * 30.0 / df
    lo = int(math.floor(df))
    if lo == df:
        return _T975[lo - 1]
    frac = df - lo
    return _T975[lo - 1] + (_T975[lo] - _T975[lo - 1]) * frac


@dataclass(frozen=True)
class RatioInterval:
    ratio: float            # geometric mean of a / geometric mean of b
    lo: float               # 95% interval; 0 and inf when either side has a single sample
    hi: float
    num_a: int
    num_b: int

    def text(self) -> str:
        if math.isinf(self.hi):
            return f"{self.ratio:.3f} x (one wave: no interval)"
        return f"{self.ratio:.3f} x [{self.lo:.3f}, {self.hi:.3f}]"

    def to_json(self) -> dict[str, float | int | None]:
        return {"ratio": self.ratio, "lo": self.lo, "hi": None if math.isinf(self.hi) else self.hi,
                "num_a": self.num_a, "num_b": self.num_b}


def _clean(xs: Sequence[float | None], name: str) -> list[float]:
    out = [float(x) for x in xs if x is not None]
    bad = [x for x in out if not math.isfinite(x) or x <= 0]
    if bad:
        raise ValueError(f"{name}: measurements must be positive and finite, got {bad[0]!r}")
    return out


def _mean_var(logs: list[float]) -> tuple[float, float]:
    m = sum(logs) / len(logs)
    v = sum((x - m) ** 2 for x in logs) / (len(logs) - 1) if len(logs) > 1 else 0.0
    return m, v


def ratio_interval(a: Sequence[float | None], b: Sequence[float | None]) -> RatioInterval | None:
    """a / b with its interval (see the module doc); None when either side has no measurement."""
    xa, xb = _clean(a, "a"), _clean(b, "b")
    if not xa or not xb:
        return None
    la, lb = [math.log(x) for x in xa], [math.log(x) for x in xb]
    ma, va = _mean_var(la)
    mb, vb = _mean_var(lb)
    d = ma - mb
    if len(xa) < 2 or len(xb) < 2:
        return RatioInterval(math.exp(d), 0.0, math.inf, len(xa), len(xb))
    sa, sb = va / len(xa), vb / len(xb)
    se2 = sa + sb
    if se2 == 0.0:
        return RatioInterval(math.exp(d), math.exp(d), math.exp(d), len(xa), len(xb))
    df = se2 ** 2 / ((sa ** 2 / (len(xa) - 1) if sa else 0.0) + (sb ** 2 / (len(xb) - 1) if sb else 0.0))
    half = t975(max(1.0, df)) * math.sqrt(se2)
    return RatioInterval(math.exp(d), math.exp(d - half), math.exp(d + half), len(xa), len(xb))


def ratio_over_runs(ratios: Sequence[float | None]) -> RatioInterval | None:
    """The geometric mean of one ratio per run, with its interval over the runs (see the module doc);
    None when no run has one. `num_a` and `num_b` are the number of runs."""
    xs = _clean(ratios, "ratios")
    if not xs:
        return None
    m, v = _mean_var([math.log(x) for x in xs])
    if len(xs) < 2:
        return RatioInterval(math.exp(m), 0.0, math.inf, 1, 1)
    half = t975(len(xs) - 1) * math.sqrt(v / len(xs))
    return RatioInterval(math.exp(m), math.exp(m - half), math.exp(m + half), len(xs), len(xs))


def judge_ratio(interval: RatioInterval, limit: float, upper: bool) -> str:
    """pass | fail | inconclusive of `interval` against a band's `limit` (see the module doc)."""
    if upper:
        if interval.hi <= limit:
            return PASS
        return FAIL if interval.lo > limit else INCONCLUSIVE
    if interval.lo >= limit:
        return PASS
    return FAIL if interval.hi < limit else INCONCLUSIVE


def fold(outcomes: Sequence[str]) -> str:
    """Many figures' outcomes as one: any fail fails; else any inconclusive is inconclusive; else pass."""
    if FAIL in outcomes:
        return FAIL
    return INCONCLUSIVE if INCONCLUSIVE in outcomes else PASS
