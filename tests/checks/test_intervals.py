"""The live intervals: Student's t, the ratio interval over repeated waves, and the three-way verdict."""

from __future__ import annotations

import math
import random

import pytest

from conformance.checks.intervals import (FAIL, INCONCLUSIVE, PASS, fold, judge_ratio, ratio_interval,
                                          ratio_over_runs, t975)


@pytest.mark.parametrize("df, want", [(1, 12.7062), (2, 4.3027), (4, 2.7764), (10, 2.2281), (30, 2.0423), (1000, 1.9623)])
def test_t975_matches_the_table_of_students_t(df, want):
    assert t975(df) == pytest.approx(want, abs=2e-3)


def test_t975_interpolates_fractional_degrees_of_freedom_between_its_neighbours():
    assert t975(2) > t975(2.5) > t975(3)
    with pytest.raises(ValueError):
        t975(0.5)


def test_identical_waves_give_an_exact_ratio():
    r = ratio_interval([100.0, 100.0, 100.0], [50.0, 50.0])
    assert (r.ratio, r.lo, r.hi) == pytest.approx((2.0, 2.0, 2.0))


def test_the_interval_holds_the_ratio_of_geometric_means_and_widens_with_noise():
    a, b = [98.0, 100.0, 102.0], [49.0, 50.0, 51.0]
    r = ratio_interval(a, b)
    geo = math.exp(sum(map(math.log, a)) / 3 - sum(map(math.log, b)) / 3)
    assert r.ratio == pytest.approx(geo) and r.lo < geo < r.hi
    noisy = ratio_interval([80.0, 100.0, 120.0], b)
    assert noisy.hi - noisy.lo > r.hi - r.lo


def test_one_wave_gives_no_interval_and_only_inconclusive_verdicts():
    r = ratio_interval([100.0], [50.0, 51.0])
    assert r.lo == 0.0 and math.isinf(r.hi) and "no interval" in r.text()
    assert judge_ratio(r, 1.5, upper=False) == INCONCLUSIVE
    assert judge_ratio(r, 1.5, upper=True) == INCONCLUSIVE
    assert ratio_interval([], [1.0]) is None


def test_bad_measurements_are_refused_with_the_value():
    with pytest.raises(ValueError, match="positive and finite"):
        ratio_interval([1.0, -2.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="inf"):
        ratio_interval([1.0, math.inf], [1.0, 1.0])


def test_the_verdict_against_a_lower_and_an_upper_limit():
    tight_low = ratio_interval([75.0, 75.5, 74.5], [100.0, 100.5, 99.5])     # ~0.75
    assert judge_ratio(tight_low, 0.9, upper=False) == FAIL
    assert judge_ratio(tight_low, 0.7, upper=False) == PASS
    assert judge_ratio(tight_low, 0.9, upper=True) == PASS
    assert judge_ratio(tight_low, 0.7, upper=True) == FAIL
    wide = ratio_interval([60.0, 90.0, 120.0], [100.0, 100.5, 99.5])
    assert judge_ratio(wide, 0.9, upper=False) == INCONCLUSIVE


def test_noise_alone_never_fails_the_same_engine_against_itself():
    """Two sets of waves drawn from one distribution (20% relative noise): over many draws the verdict
    against the parity band is pass or inconclusive, never fail, whenever the true ratio is 1."""
    rng = random.Random(7)
    outcomes = set()
    for _ in range(500):
        a = [100 * math.exp(rng.gauss(0, 0.2)) for _ in range(3)]
        b = [100 * math.exp(rng.gauss(0, 0.2)) for _ in range(3)]
        outcomes.add(judge_ratio(ratio_interval(a, b), 0.75, upper=False))
    assert FAIL not in outcomes and INCONCLUSIVE in outcomes


def test_fold_any_fail_then_any_inconclusive():
    assert fold([PASS, INCONCLUSIVE, FAIL]) == FAIL
    assert fold([PASS, INCONCLUSIVE]) == INCONCLUSIVE
    assert fold([PASS, PASS]) == PASS


def test_ratios_over_runs_take_the_run_as_the_unit():
    """Six runs' ratios: the geometric mean, and Student's t over the runs with 5 degrees of freedom."""
    ratios = [0.824, 1.061, 0.994, 1.034, 1.074, 1.042]
    r = ratio_over_runs(ratios)
    logs = [math.log(x) for x in ratios]
    m = sum(logs) / 6
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / 5)
    assert r.ratio == pytest.approx(math.exp(m))
    assert (r.lo, r.hi) == (pytest.approx(math.exp(m - 2.570582 * sd / math.sqrt(6))),
                            pytest.approx(math.exp(m + 2.570582 * sd / math.sqrt(6))))
    assert (r.num_a, r.num_b) == (6, 6)
    assert judge_ratio(r, 1.0, upper=True) == INCONCLUSIVE       # the runs straddle 1: a tie
    steady = ratio_over_runs([1.074, 1.080, 1.070])
    assert judge_ratio(steady, 1.0, upper=True) == FAIL          # every run worse, and little spread


def test_one_run_gives_no_interval_over_runs():
    r = ratio_over_runs([1.2])
    assert r.ratio == pytest.approx(1.2) and r.lo == 0.0 and math.isinf(r.hi)
    assert judge_ratio(r, 1.0, upper=True) == INCONCLUSIVE
    assert ratio_over_runs([None]) is None
    with pytest.raises(ValueError, match="ratios"):
        ratio_over_runs([1.0, 0.0])
