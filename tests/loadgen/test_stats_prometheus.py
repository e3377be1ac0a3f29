from __future__ import annotations

import statistics

import pytest
from hypothesis import given, strategies as st

from conformance.loadgen.prometheus import parse_samples
from conformance.loadgen.stats import quantile, spread


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=1, max_size=50))
def test_median_is_statistics_median(xs: list[float]) -> None:
    assert quantile(xs, 0.5) == pytest.approx(statistics.median(xs), abs=1e-6)


@given(st.lists(st.floats(min_value=0, max_value=1e3), min_size=2, max_size=50))
def test_quantiles_match_statistics_inclusive(xs: list[float]) -> None:
    deciles = statistics.quantiles(xs, n=10, method="inclusive")
    assert quantile(xs, 0.1) == pytest.approx(deciles[0], abs=1e-6)
    assert quantile(xs, 0.9) == pytest.approx(deciles[-1], abs=1e-6)


def test_spread_scales_and_counts() -> None:
    assert spread([]) is None
    s = spread([0.001, 0.002, 0.003], 1e3)
    assert s["median"] == pytest.approx(2.0) and s["num_samples"] == 3


def test_parse_samples_sums_labels_and_skips_comments() -> None:
    text = ("# HELP x_total help\n# TYPE x counter\nx_total 3\n"
            'y_total{engine="0",model_name="m"} 2.5\ny_total{engine="1"} 1.5\n'
            "z_created 1.7e9\nbad line here\nnan_metric NaN\n")
    got = parse_samples(text)
    assert got == {"x_total": 3.0, "y_total": 4.0, "z_created": 1.7e9}
