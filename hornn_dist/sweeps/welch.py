"""Welch's t-test: the two-sided p that two seed groups' means differ (unequal variances),
and Holm's correction of many such p for being read together.

Written out (Student's t tail through the regularized incomplete beta function, by its
continued fraction, Numerical Recipes §6.4) so that the report needs no scipy; checked against
a float64 integral of the t density and tabulated critical values (tests/test_welch.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

TINY = 1e-300  # keeps the continued fraction's denominators off zero
EPS = 3e-16


def welch_p(mean_a: float, sd_a: float, n_a: int, mean_b: float, sd_b: float, n_b: int) -> float:
    """Return Welch's two-sided p for the means of samples A and B (sample sds, n >= 2 each),
    with the Welch-Satterthwaite degrees of freedom."""
    va, vb = sd_a * sd_a / n_a, sd_b * sd_b / n_b
    se2 = va + vb
    if se2 == 0:
        return 1.0 if mean_a == mean_b else 0.0
    t = abs(mean_a - mean_b) / math.sqrt(se2)
    df = se2 * se2 / (va * va / (n_a - 1) + vb * vb / (n_b - 1))
    return t_two_sided_p(t, df)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Return Holm's adjusted p of each of `pvalues`, in their order (Holm 1979, the step-down
    Bonferroni correction): with the m p sorted ascending, p_(1) <= ... <= p_(m), the adjusted
    p_(i) is the largest of min(1, (m - j + 1) p_(j)) over j <= i. Where every verdict that
    needs an adjusted p < alpha is kept, the chance of any false one among the m stays under
    alpha, whatever the tests' dependence; raise ValueError for a p outside [0, 1]."""
    for p in pvalues:
        if not 0.0 <= p <= 1.0:  # NaN too
            raise ValueError(f"a p-value is in [0, 1], got {p!r}")
    m = len(pvalues)
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda i: pvalues[i])):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def t_two_sided_p(t: float, df: float) -> float:
    """Return P(|T| >= t) for Student's t with `df` (any real > 0) degrees of freedom."""
    return regularized_beta(df / 2.0, 0.5, df / (df + t * t))


def regularized_beta(a: float, b: float, x: float) -> float:
    """Return the regularized incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = a * math.log(x) + b * math.log1p(-x) + math.lgamma(a + b)
    front = math.exp(log_front - math.lgamma(a) - math.lgamma(b))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    """Return the continued fraction of I_x(a, b) (modified Lentz's method)."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > TINY else TINY)
    h = d
    for m in range(1, 1000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > TINY else TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > TINY else TINY
            h *= d * c
        if abs(d * c - 1.0) < EPS:
            break
    return h
