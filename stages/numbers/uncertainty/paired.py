"""Paired tests of two runs on the problems both scored (attempt 1 of each).

- Resolved problems: the exact McNemar test. Of the problems resolved by exactly one run, `only_a` were
  resolved by A alone and `only_b` by B alone; under "no difference" each of those `n = only_a + only_b`
  discordant problems is A's or B's with probability 1/2, so the two-sided p is
  `min(1, 2 * sum_{i=0}^{min(only_a, only_b)} C(n, i) / 2^n)` (the two-sided
  `scipy.stats.binomtest(min, n, 0.5).pvalue`; the tests check they agree), and p = 1 when no problem is
  discordant.
- Step pass rates: each scored step gives a difference `d_ij = x^B_ij - x^A_ij` (1 for pass, else 0). The
  paired difference is `D = p_B - p_A = sum d / N` over the N steps of the common problems.
  Its interval is Newcombe's hybrid score interval for a paired difference (R. G. Newcombe, Statistics in
  Medicine 17, 1998, 2635-2650, method 10), built from each run's clustered Wilson interval `[l, u]` of its
  rate on those steps (`stages.numbers.uncertainty.intervals`) and the correlation `phi` of the two rates:

      low  = D - sqrt((p_B - l_B)^2 - 2 phi (p_B - l_B) (u_A - p_A) + (u_A - p_A)^2)
      high = D + sqrt((u_B - p_B)^2 - 2 phi (u_B - p_B) (p_A - l_A) + (p_A - l_A)^2)

  clipped to [-1, 1]. `phi` is the correlation of the two rates clustered by problem: with
  `a_i = passed^A_i - p_A steps_i` and `b_i` likewise, `r = sum a_i b_i / sqrt(sum a_i^2 sum b_i^2)`, and 0
  where that is undefined (a run's problems all at its rate, as at 0% or 100%). Newcombe's correction (his
  `ad - bc` of the 2x2 table lowered by `m/2`, m pairs) comes to subtracting `c = 1 / (2 m sqrt(p_A (1 - p_A)
  p_B (1 - p_B)))` from a positive r (`phi = r - c`, 0 where r lies in [0, c]; a negative r is kept); here m is
  the geometric mean of the two rates' effective sample sizes. With one step per problem (n_eff = N) this is Newcombe's
  interval exactly; with phi = 0 it is his interval for two independent rates. The correction keeps phi below
  1, so runs whose steps all agree still get an interval of about +-z / m around D = 0, never a point.
  The standard error clustered by problem (E. Miller, "Adding Error Bars to Evals", 2024),
  `SE = sqrt(sum over problems of (sum_j d_ij - D * steps_i)^2) / N`, gives the test `p = 2 * (1 - Phi(|D| /
  SE))`. With SE = 0 the test is undefined (p None) unless D = 0 (then p = 1).

A difference is called distinguishable from noise only where p < `NOISE_LEVEL` and, for the step difference,
its interval excludes 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from stages.numbers.uncertainty.intervals import Interval, clustered_se, clustered_wilson

NOISE_LEVEL = 0.05
STEP_DIFFERENCE_METHOD = "newcombe_clustered"
STEP_DIFFERENCE_SHORT = "Newcombe hybrid score, clustered by problem"
STEP_DIFFERENCE_DESCRIPTION = (
    "Newcombe's hybrid score interval for a paired difference (Newcombe 1998, method 10) of p_B - p_A on the "
    "steps both runs scored, from each run's clustered Wilson interval [l, u]: low = D - sqrt((p_B - l_B)^2 - "
    "2 phi (p_B - l_B)(u_A - p_A) + (u_A - p_A)^2), high = D + sqrt((u_B - p_B)^2 - 2 phi (u_B - p_B)(p_A - "
    "l_A) + (p_A - l_A)^2), clipped to [-1, 1]; phi: the correlation r = sum a_i b_i / sqrt(sum a_i^2 sum "
    "b_i^2), a_i = passed^A_i - p_A steps_i, b_i likewise (0 where undefined), less Newcombe's correction "
    "c = 1 / (2 m sqrt(p_A (1 - p_A) p_B (1 - p_B))) when positive (0 where r is in [0, c]), m the geometric "
    "mean of the two effective sample sizes; p from the normal test on the SE clustered by problem"
)


@dataclass(frozen=True)
class PairedProblem:
    """One problem both runs scored: whether each resolved it, and each run's passed steps of its scored steps."""

    problem_id: str
    resolved_a: bool
    resolved_b: bool
    passed_a: int
    passed_b: int
    steps: int


@dataclass(frozen=True)
class McNemar:
    """Resolved problems of the pair: concordant and discordant counts and the exact two-sided p."""

    both: int
    neither: int
    only_a: int
    only_b: int
    p_value: float

    @property
    def discordant(self) -> int:
        return self.only_a + self.only_b


@dataclass(frozen=True)
class StepDifference:
    """B's step pass rate minus A's on the same steps, with its clustered SE and p, and Newcombe's interval from
    the correlation it used."""

    difference: float | None
    se: float | None
    interval: Interval | None
    p_value: float | None
    steps: int
    problems: int
    correlation: float | None = None


def mcnemar_exact_p(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p of the discordant counts (1.0 when there is no discordant pair)."""
    if only_a < 0 or only_b < 0:
        raise ValueError(f"mcnemar: counts must be >= 0, got {only_a} and {only_b}")
    discordant = only_a + only_b
    if discordant == 0:
        return 1.0
    tail = sum(math.comb(discordant, i) for i in range(min(only_a, only_b) + 1))
    return min(1.0, 2 * tail / (1 << discordant))


def mcnemar(problems: Sequence[PairedProblem]) -> McNemar:
    only_a = sum(p.resolved_a and not p.resolved_b for p in problems)
    only_b = sum(p.resolved_b and not p.resolved_a for p in problems)
    both = sum(p.resolved_a and p.resolved_b for p in problems)
    neither = len(problems) - only_a - only_b - both
    return McNemar(both, neither, only_a, only_b, mcnemar_exact_p(only_a, only_b))


def normal_two_sided_p(z: float) -> float:
    """2 * (1 - Phi(|z|))."""
    return math.erfc(abs(z) / math.sqrt(2.0))


def newcombe_difference(
    rate_a: float, interval_a: Interval, rate_b: float, interval_b: Interval, correlation: float
) -> Interval:
    """Newcombe's hybrid score interval of rate_b - rate_a from each rate's interval and their correlation."""
    below_b, above_b = rate_b - interval_b.low, interval_b.high - rate_b
    below_a, above_a = rate_a - interval_a.low, interval_a.high - rate_a

    def distance(first: float, second: float) -> float:
        return math.sqrt(max(0.0, first * first - 2.0 * correlation * first * second + second * second))

    difference = rate_b - rate_a
    return Interval.clipped(difference - distance(below_b, above_a), difference + distance(above_b, below_a), -1.0, 1.0)


def paired_correlation(problems: Sequence[PairedProblem], rate_a: float, rate_b: float, pairs: float) -> float:
    """The correlation of the two step rates clustered by problem, less Newcombe's correction for `pairs`
    (effective) pairs; 0 where undefined (see the module docstring)."""
    a = [p.passed_a - rate_a * p.steps for p in problems]
    b = [p.passed_b - rate_b * p.steps for p in problems]
    scale = math.sqrt(math.fsum(x * x for x in a) * math.fsum(y * y for y in b))
    if scale == 0.0:
        return 0.0
    correlation = min(1.0, max(-1.0, math.fsum(x * y for x, y in zip(a, b)) / scale))
    if correlation < 0.0:
        return correlation
    correction = 1.0 / (2.0 * pairs * math.sqrt(rate_a * (1.0 - rate_a) * rate_b * (1.0 - rate_b)))
    return max(0.0, correlation - correction)


def step_difference(problems: Sequence[PairedProblem]) -> StepDifference:
    """The paired difference of step pass rates, B minus A (see the module docstring)."""
    steps = sum(p.steps for p in problems)
    marginal_a = clustered_wilson([(p.passed_a, p.steps) for p in problems])
    marginal_b = clustered_wilson([(p.passed_b, p.steps) for p in problems])
    if steps <= 0 or marginal_a is None or marginal_b is None:
        return StepDifference(None, None, None, None, steps, len(problems))
    rate_a, rate_b = sum(p.passed_a for p in problems) / steps, sum(p.passed_b for p in problems) / steps
    difference = sum(p.passed_b - p.passed_a for p in problems) / steps
    pairs = math.sqrt(marginal_a[1].effective * marginal_b[1].effective)
    correlation = paired_correlation(problems, rate_a, rate_b, pairs)
    interval = newcombe_difference(rate_a, marginal_a[0], rate_b, marginal_b[0], correlation)
    se = clustered_se(((p.passed_b - p.passed_a, p.steps) for p in problems), difference, steps)
    if se > 0:
        p_value: float | None = normal_two_sided_p(difference / se)
    else:
        p_value = 1.0 if difference == 0 else None
    return StepDifference(difference, se, interval, p_value, steps, len(problems), correlation)


def distinguishable(p_value: float | None, interval: Interval | None = None) -> bool:
    """p < NOISE_LEVEL and, for a difference shown with an interval, that interval excludes 0 (the normal test and
    the Newcombe interval can disagree near the boundaries: the difference is then not called distinguishable)."""
    excludes_zero = interval is None or interval.low > 0 or interval.high < 0
    return p_value is not None and p_value < NOISE_LEVEL and excludes_zero


def noise_verdict(p_value: float | None, interval: Interval | None = None) -> str:
    if p_value is None:
        return "no test possible (no variation between problems)"
    return "distinguishable from noise" if distinguishable(p_value, interval) else "not distinguishable from noise"
