"""The tests a gap is read by (``mmf_uvlp/replication/significance.py``), against what does not
share their code: closed forms of Student's t, a simulation of the paired t test, Holm's
procedure worked by hand, a pooled variance summed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mmf_uvlp.replication.significance import (
    PooledSpread,
    detectable,
    holm,
    pooled_spread,
    t_test,
    trend,
)


def simulated_power(difference: float, seeds: int, runs: int = 200_000) -> float:
    """How often a two-sided paired t test at 0.05 over ``seeds`` seeds rejects when the
    seeds' differences are drawn around ``difference`` with a standard error of 1."""
    rng = np.random.default_rng(0)
    draws = rng.normal(difference, math.sqrt(seeds), size=(runs, seeds))
    t = draws.mean(axis=1) / (draws.std(axis=1, ddof=1) / math.sqrt(seeds))
    return float(np.mean(np.abs(t) > stats.t.ppf(0.975, seeds - 1)))


@pytest.mark.parametrize("seeds", [2, 3, 5])
def test_the_detectable_difference_is_detected_at_80_percent_power(seeds):
    """A paired t test over simulated seeds rejects 80 % of the time at the difference
    :func:`detectable` gives (standard error 1); the approximation the tables used before,
    (t(0.975, df) + t(0.8, df)) x SE, falls short of it (power 0.73 on 2 seeds, 0.77 on 3)."""
    found = detectable(1.0, seeds - 1)
    assert simulated_power(found, seeds) == pytest.approx(0.80, abs=0.005)
    approximate = stats.t.ppf(0.975, seeds - 1) + stats.t.ppf(0.8, seeds - 1)
    assert simulated_power(approximate, seeds) < 0.795


def test_the_detectable_difference_scales_with_the_standard_error_and_tends_to_the_normal():
    assert detectable(2.7, 2) == pytest.approx(2.7 * detectable(1.0, 2))
    assert detectable(0.0, 2) == 0.0
    # df -> infinity: the normal's z(0.975) + z(0.8) = 1.95996 + 0.84162.
    assert detectable(1.0, 1e7) == pytest.approx(1.95996 + 0.84162, abs=1e-4)


def test_the_interval_and_p_are_student_s_t():
    """df 2: P(|T| > t) = 1 - t / sqrt(t² + 2), and the 97.5 % point solves
    t / sqrt(t² + 2) = 0.95: t = sqrt(2 x 0.9025 / 0.0975) = 4.3027."""
    test = t_test("paired", 0.05, 0.02, 2)
    assert test.p == pytest.approx(1 - 2.5 / math.sqrt(2.5**2 + 2))
    half = math.sqrt(2 * 0.9025 / 0.0975) * 0.02
    assert test.interval == pytest.approx((0.05 - half, 0.05 + half))
    assert test.significant is False  # p = 0.13
    assert t_test("paired", 0.05, 0.005, 2).significant  # t = 10, p = 0.0099


def test_holm_s_adjusted_p_values_worked_by_hand():
    """Holm (1979): sorted p(1) <= ... <= p(m) become max over j <= k of (m - j + 1) p(j),
    capped at 1, given back in the input's order."""
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([0.02]) == pytest.approx([0.02])
    assert holm([]) == []


def test_the_pooled_spread_sums_the_rows_variances_by_their_degrees_of_freedom():
    """Rows with std 1, 2 and 3 over 3 seeds, one over 2 seeds with std 4, one single seed:
    s² = (2 + 8 + 18 + 16) / 7 on 7 df; the single seed adds nothing."""
    spread = pooled_spread(
        [("a", 1.0, 3), ("b", 2.0, 3), ("c", 3.0, 3), ("d", 4.0, 2), ("e", 0.0, 1)]
    )
    assert spread.df == 7 and spread.rows == ("a", "b", "c", "d")
    assert spread.sd == pytest.approx(math.sqrt(44 / 7))
    assert pooled_spread([("e", 0.0, 1)]) is None
    # One seed against three: SE = s x sqrt(1 + 1/3) on the pooled df.
    test = PooledSpread(2.0, 24, ()).test(-3.8, 1, 3)
    assert test.kind == "pooled-SD" and test.df == 24
    assert test.t == pytest.approx(-3.8 / (2.0 * math.sqrt(4 / 3)))


def test_the_trend_is_the_least_squares_slope_with_its_t_test():
    """Against numpy's polyfit and the textbook standard error of a slope,
    sqrt(sum(residual²) / (n - 2) / sum((x - x̄)²)), on n - 2 degrees of freedom."""
    xs = [0, 0, 0, 20, 40, 60, 80, 100]
    values = [61.0, 62.0, 62.5, 66.0, 65.0, 70.0, 69.0, 73.0]
    found = trend(xs, values)
    slope, intercept = np.polyfit(xs, values, 1)
    residuals = np.array(values) - (slope * np.array(xs) + intercept)
    x = np.array(xs, dtype=float)
    stderr = math.sqrt((residuals**2).sum() / 6 / ((x - x.mean()) ** 2).sum())
    assert found.slope == pytest.approx(slope) and found.stderr == pytest.approx(stderr)
    assert found.p == pytest.approx(2 * stats.t.sf(slope / stderr, 6))
    half = stats.t.ppf(0.975, 6) * stderr
    assert found.interval == pytest.approx((slope - half, slope + half))
    assert trend([0, 0], [1.0, 2.0]) is None and trend([5, 5, 5], [1.0, 2.0, 3.0]) is None
