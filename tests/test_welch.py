"""Welch's t-test against tabulated critical values and a float64 integral of the t density;
Holm's correction against a hand-computed case and the step-down procedure it summarises."""

from __future__ import annotations

import math
import random

import pytest

from hornn_dist.sweeps.welch import holm, regularized_beta, t_two_sided_p, welch_p


@pytest.mark.parametrize(
    "t,df", [(12.706205, 1), (4.302653, 2), (2.776445, 4), (2.228139, 10), (1.959964, 1e7)]
)
def test_the_tabulated_two_sided_5_percent_points(t: float, df: float) -> None:
    assert t_two_sided_p(t, df) == pytest.approx(0.05, abs=2e-6)


def _t_tail_by_integral(t: float, df: float, steps: int = 200_000) -> float:
    """Return P(|T| >= t) as 1 - the integral of the t density over [-t, t] (Simpson, float64)."""
    scale = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def density(u: float) -> float:
        return scale * (1 + u * u / df) ** (-(df + 1) / 2)

    h = t / steps
    total = density(0) + density(t)
    total += sum((4 if k % 2 else 2) * density(k * h) for k in range(1, steps))
    return 1 - 2 * total * h / 3


@pytest.mark.parametrize("t,df", [(0.3, 2.5), (1.9, 3.7), (3.1, 5.2), (0.0, 4.0), (6.0, 2.2)])
def test_the_tail_is_the_integral_of_the_density(t: float, df: float) -> None:
    assert t_two_sided_p(t, df) == pytest.approx(_t_tail_by_integral(t, df), abs=1e-9)


def test_the_incomplete_beta_at_its_closed_forms() -> None:
    for x in (0.1, 0.5, 0.93):
        assert regularized_beta(1.0, 1.0, x) == pytest.approx(x, abs=1e-14)  # uniform
        assert regularized_beta(2.0, 1.0, x) == pytest.approx(x * x, abs=1e-14)
        assert regularized_beta(0.5, 0.5, x) == pytest.approx(
            2 / math.pi * math.asin(math.sqrt(x)), abs=1e-12
        )


def test_welch_p_of_two_seed_groups() -> None:
    # 50, 51, 52 against 55, 56, 57: t = 5 / sqrt(2/3), df 4
    assert welch_p(51, 1, 3, 56, 1, 3) == pytest.approx(t_two_sided_p(5 / math.sqrt(2 / 3), 4))
    assert welch_p(51, 1, 3, 56, 1, 3) < 0.01
    assert welch_p(51, 1, 3, 51, 2, 3) == pytest.approx(1.0)
    # unequal variances: Welch-Satterthwaite df = (1/3 + 4/3)^2 / ((1/3)^2/2 + (4/3)^2/2)
    df = (5 / 3) ** 2 / ((1 / 9) / 2 + (16 / 9) / 2)
    assert welch_p(50, 1, 3, 53, 2, 3) == pytest.approx(t_two_sided_p(3 / math.sqrt(5 / 3), df))


def test_holm_by_hand() -> None:
    # sorted 0.005, 0.01, 0.03, 0.04 (m = 4): 4 x 0.005 = 0.02, 3 x 0.01 = 0.03, 2 x 0.03 = 0.06,
    # 1 x 0.04 = 0.04 raised to the 0.06 before it; a product over 1 stays 1
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.3, 0.6]) == pytest.approx([0.6, 0.6])
    assert holm([0.7, 0.2]) == pytest.approx([0.7, 0.4]) and holm([0.7, 0.6]) == [1.0, 1.0]
    assert holm([0.02]) == [0.02] and holm([]) == []
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        holm([0.01, math.nan])


def _holm_by_steps(pvalues: list[float]) -> list[float]:
    """Return each p's adjusted p as the smallest level alpha at which Holm's step-down procedure
    rejects it: with the p ascending, reject while p_(k) <= alpha / (m - k + 1), stop at the
    first that is not (the level is searched among the products the procedure compares; one
    rejected at no level below 1 is 1)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    levels = sorted({min(1.0, (m - k) * pvalues[i]) for k, i in enumerate(order)} | {1.0})

    def rejected(alpha: float) -> set[int]:
        out = set()
        for k, i in enumerate(order):
            if pvalues[i] * (m - k) > alpha * (1 + 1e-12):
                break
            out.add(i)
        return out

    return [next((a for a in levels if i in rejected(a)), 1.0) for i in range(m)]


def test_holm_is_the_step_down_procedure() -> None:
    rng = random.Random(1234)
    for m in (1, 2, 3, 5, 22):
        for _ in range(50):
            p = [rng.choice([rng.random(), rng.random() ** 6, 0.5]) for _ in range(m)]
            assert holm(p) == pytest.approx(_holm_by_steps(p), rel=1e-12), p
