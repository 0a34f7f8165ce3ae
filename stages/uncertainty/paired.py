"""Paired tests of two runs on the problems both scored (attempt 1 of each).

- Resolved problems: the exact McNemar test. Of the problems resolved by exactly one run, `only_a` were
  resolved by A alone and `only_b` by B alone; under "no difference" each of those `n = only_a + only_b`
  discordant problems is A's or B's with probability 1/2, so the two-sided p is
  `min(1, 2 * sum_{i=0}^{min(only_a, only_b)} C(n, i) / 2^n)` (the two-sided
  `scipy.stats.binomtest(min, n, 0.5).pvalue`; the tests check they agree), and p = 1 when no problem is
  discordant.
- Step pass rates: each scored step gives a difference `d_ij = x^B_ij - x^A_ij` (1 for pass, else 0). The
  paired difference is `D = sum d / N` over the N steps of the common problems; its standard error is
  clustered by problem as for one run (E. Miller, "Adding Error Bars to Evals", 2024),
  `SE = sqrt(sum over problems of (sum_j d_ij - D * steps_i)^2) / N`; the interval is `D +- 1.96 SE`
  clipped to [-1, 1] and `p = 2 * (1 - Phi(|D| / SE))`. With SE = 0 the test is undefined (p None) unless
  D = 0 (then p = 1).

A difference is called distinguishable from noise only where p < `NOISE_LEVEL`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stages.uncertainty.intervals import Z_95, Interval, clustered_se

NOISE_LEVEL = 0.05


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

    def to_record(self) -> dict[str, Any]:
        return {
            "both": self.both,
            "neither": self.neither,
            "only_a": self.only_a,
            "only_b": self.only_b,
            "p_value": self.p_value,
        }


@dataclass(frozen=True)
class StepDifference:
    """B's step pass rate minus A's on the same steps, with its clustered SE, interval and p."""

    difference: float | None
    se: float | None
    interval: Interval | None
    p_value: float | None
    steps: int
    problems: int

    def to_record(self) -> dict[str, Any]:
        return {
            "difference": self.difference,
            "se": self.se,
            "low": self.interval.low if self.interval else None,
            "high": self.interval.high if self.interval else None,
            "p_value": self.p_value,
            "steps": self.steps,
            "problems": self.problems,
        }


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


def step_difference(problems: Sequence[PairedProblem]) -> StepDifference:
    """The paired difference of step pass rates, B minus A (see the module docstring)."""
    steps = sum(p.steps for p in problems)
    if steps <= 0:
        return StepDifference(None, None, None, None, steps, len(problems))
    difference = sum(p.passed_b - p.passed_a for p in problems) / steps
    se = clustered_se(((p.passed_b - p.passed_a, p.steps) for p in problems), difference, steps)
    interval = Interval.clipped(difference - Z_95 * se, difference + Z_95 * se, -1.0, 1.0)
    if se > 0:
        p_value: float | None = normal_two_sided_p(difference / se)
    else:
        p_value = 1.0 if difference == 0 else None
    return StepDifference(difference, se, interval, p_value, steps, len(problems))


def distinguishable(p_value: float | None) -> bool:
    return p_value is not None and p_value < NOISE_LEVEL


def noise_verdict(p_value: float | None) -> str:
    if p_value is None:
        return "no test possible (no variation between problems)"
    return "distinguishable from noise" if distinguishable(p_value) else "not distinguishable from noise"
