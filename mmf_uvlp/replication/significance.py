"""The tests a Meta-Ave gap is read by: Student's t, its confidence interval, its power and
Holm's correction over a table's family of orderings.

- :func:`t_test`: a difference and its standard error on ``df`` degrees of freedom give
  t, the two-sided p and the 95 % confidence interval from the exact t distribution, and
  the smallest difference the test detects at 80 % power (:func:`detectable`), from the
  noncentral t: the test rejects when |T| > t(1 - alpha/2, df), and under a true difference
  d, T follows the noncentral t with noncentrality d / SE.
- :func:`pooled_spread`: the seed-to-seed standard deviation of a Meta-Ave pooled over the
  rows that have two seeds or more, sum((n_i - 1) s_i^2) / sum(n_i - 1) on sum(n_i - 1)
  degrees of freedom: the yardstick of a row with one seed, whose own spread is unknown.
- :func:`holm`: Holm's step-down adjusted p-values, which keep the chance of any false
  "holds" among a table's orderings under alpha.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from scipy import optimize, stats

ALPHA = 0.05  # the two-sided level of every verdict, interval and detectable difference
POWER = 0.80  # the power at which :attr:`TTest.detectable` is detected


def detectable(stderr: float, df: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest true difference a two-sided t test at ``alpha`` on ``df`` detects with
    probability ``power``, for a difference measured with standard error ``stderr``."""
    if stderr == 0:
        return 0.0
    critical = stats.t.ppf(1 - alpha / 2, df)

    def shortfall(shift: float) -> float:
        # P(T < -c) under shift d is P(T > c) under -d (scipy's cdf far in the tail is nan)
        rejects = stats.nct.sf(critical, df, shift) + stats.nct.sf(critical, df, -shift)
        return rejects - power

    high = critical + stats.norm.ppf(power) + 1.0
    while shortfall(high) < 0:
        high *= 2
    return float(optimize.brentq(shortfall, 0.0, high, xtol=1e-10) * stderr)


@dataclass(frozen=True)
class TTest:
    """A t test of a difference: ``kind`` (``paired``, ``Welch`` or ``pooled-SD``), its
    statistic ``t`` (difference / standard error), degrees of freedom ``df``, two-sided
    ``p``, the 95 % confidence ``interval`` of the difference and ``detectable``: the smallest
    |difference| it detects at :data:`POWER` and :data:`ALPHA` (:func:`detectable`)."""

    kind: str
    t: float
    df: float
    p: float
    detectable: float
    interval: tuple[float, float] = (math.nan, math.nan)

    @property
    def significant(self) -> bool:
        return self.p < ALPHA


def t_test(kind: str, difference: float, stderr: float, df: float) -> TTest:
    """The :class:`TTest` of ``difference`` with standard error ``stderr`` on ``df``."""
    t = (
        difference / stderr
        if stderr
        else (math.copysign(math.inf, difference) if difference else 0.0)
    )
    p = float(2 * stats.t.sf(abs(t), df))
    half = float(stats.t.ppf(1 - ALPHA / 2, df) * stderr)
    return TTest(kind, t, df, p, detectable(stderr, df), (difference - half, difference + half))


@dataclass(frozen=True)
class PooledSpread:
    """A Meta-Ave's seed-to-seed standard deviation ``sd`` pooled over ``rows`` (their
    system keys) on ``df`` degrees of freedom."""

    sd: float
    df: int
    rows: tuple[str, ...]

    def test(self, difference: float, n_above: int, n_below: int) -> TTest:
        """The t test of a difference of two means over ``n_above`` and ``n_below`` seeds,
        each seed's spread being the pooled one: SE = sd x sqrt(1/n1 + 1/n2)."""
        stderr = self.sd * math.sqrt(1 / n_above + 1 / n_below)
        return t_test("pooled-SD", difference, stderr, self.df)


def pooled_spread(spreads: Sequence[tuple[str, float, int]]) -> PooledSpread | None:
    """:class:`PooledSpread` of (row, sample std, seeds) triples, over those with two seeds
    or more (None without any)."""
    used = [(row, std, n) for row, std, n in spreads if n > 1]
    if not used:
        return None
    df = sum(n - 1 for _, _, n in used)
    variance = sum((n - 1) * std**2 for _, std, n in used) / df
    return PooledSpread(math.sqrt(variance), df, tuple(row for row, _, _ in used))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's adjusted p-values, in the order given: the k-th smallest p times (m - k + 1),
    never below an earlier one's, at most 1."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * len(pvalues), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[index]))
        adjusted[index] = running
    return adjusted


@dataclass(frozen=True)
class Trend:
    """The least-squares line of ``n`` values against their x: ``slope`` per unit of x, its
    standard error, t and two-sided p on ``n - 2`` degrees of freedom, and its 95 %
    confidence ``interval``."""

    slope: float
    stderr: float
    t: float
    p: float
    n: int
    interval: tuple[float, float]


def trend(xs: Sequence[float], values: Sequence[float]) -> Trend | None:
    """:class:`Trend` of ``values`` against ``xs`` (None with fewer than three values or
    fewer than two distinct x)."""
    if len(values) < 3 or len(set(xs)) < 2:
        return None
    fit = stats.linregress(xs, values)
    df = len(values) - 2
    half = float(stats.t.ppf(1 - ALPHA / 2, df) * fit.stderr)
    t = fit.slope / fit.stderr if fit.stderr else math.copysign(math.inf, fit.slope)
    return Trend(
        float(fit.slope),
        float(fit.stderr),
        float(t),
        float(fit.pvalue),
        len(values),
        (float(fit.slope) - half, float(fit.slope) + half),
    )
