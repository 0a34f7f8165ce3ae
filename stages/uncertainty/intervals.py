"""95% intervals of a run's headline numbers, from per-problem tallies.

- Main-problem resolve rate, `r` resolved of `n` problems: the Wilson score interval (no continuity correction),
  `centre +- half` with `centre = (r + z^2/2) / (n + z^2)` and `half = z / (n + z^2) * sqrt(r (n - r) / n + z^2/4)`,
  z the 97.5% normal quantile: the value of `scipy.stats.binomtest(r, n).proportion_ci(method="wilson")`
  (the tests check they agree), computed here without importing scipy.stats (seconds of import per summary).
- Subproblem pass rate `p = (sum of passed steps) / N` over N scored steps: steps of one problem are not
  independent (they share the problem and carry each other's code), so the standard error is clustered by
  problem (E. Miller, "Adding Error Bars to Evals", 2024):

      SE = sqrt( sum over problems i of ( sum over the steps j of i of (x_ij - p) )^2 ) / N

  where x_ij is 1 for a passed step and 0 otherwise, i.e. the inner sum is `passed_i - p * steps_i`. The
  interval is `p +- 1.96 SE`, clipped to [0, 1].
- pass@k: the mean over problems of each problem's unbiased pass@k; its interval is the 2.5th and 97.5th
  percentiles of that mean over `BOOTSTRAP_RESAMPLES` resamples of the problems with replacement, drawn with
  numpy's `default_rng(BOOTSTRAP_SEED)` (fixed and recorded, so the same run gives the same interval):
  `bootstrap_mean_intervals` here, applied to pass@k by `stages.passk.pass_at_k_intervals`.
- Groups (a field, a subfield, a split) get intervals only with at least `MIN_GROUP_PROBLEMS` problems; a
  smaller group shows its counts only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

LEVEL = 0.95
Z_95 = 1.96
MIN_GROUP_PROBLEMS = 5
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 20240517
RESOLVE_METHOD = "wilson"
STEP_METHOD = "clustered by problem"
PASS_AT_K_METHOD = "bootstrap percentile over problems"


@dataclass(frozen=True)
class Interval:
    """A closed interval [low, high] of a rate (95% unless stated)."""

    low: float
    high: float

    def to_record(self) -> dict[str, float]:
        return {"low": self.low, "high": self.high}

    @classmethod
    def clipped(cls, low: float, high: float, lowest: float = 0.0, highest: float = 1.0) -> Interval:
        return cls(max(lowest, low), min(highest, high))


@dataclass(frozen=True)
class ProblemTally:
    """One problem in one attempt: whether it was resolved, and its passed and scored steps."""

    resolved: bool
    steps_passed: int
    steps_scored: int


@dataclass(frozen=True)
class ResolveRate:
    """Resolved problems over problems, with the Wilson interval (None when there is no problem)."""

    resolved: int
    problems: int
    interval: Interval | None

    @property
    def rate(self) -> float | None:
        return self.resolved / self.problems if self.problems else None

    def to_record(self) -> dict[str, Any]:
        return {
            "estimate": self.rate,
            "low": self.interval.low if self.interval else None,
            "high": self.interval.high if self.interval else None,
            "method": RESOLVE_METHOD,
            "problems": self.problems,
        }


@dataclass(frozen=True)
class StepRate:
    """Passed steps over scored steps, with the problem-clustered standard error and interval."""

    passed: int
    steps: int
    problems: int
    se: float | None
    interval: Interval | None

    @property
    def rate(self) -> float | None:
        return self.passed / self.steps if self.steps else None

    def to_record(self) -> dict[str, Any]:
        return {
            "estimate": self.rate,
            "se": self.se,
            "low": self.interval.low if self.interval else None,
            "high": self.interval.high if self.interval else None,
            "method": STEP_METHOD,
            "problems": self.problems,
            "steps": self.steps,
        }


@dataclass(frozen=True)
class HeadlineIntervals:
    """The two headline rates of a group of problems with their intervals."""

    resolve: ResolveRate
    steps: StepRate

    def to_record(self) -> dict[str, Any]:
        return {"main_problem_resolve_rate": self.resolve.to_record(), "subproblem": self.steps.to_record()}


# ---------------------------------------------------------------------------
# The estimators
# ---------------------------------------------------------------------------


def wilson_interval(successes: int, trials: int, level: float = LEVEL) -> Interval | None:
    """The Wilson score interval of `successes` out of `trials` (None for no trial)."""
    if trials <= 0:
        return None
    if not 0 <= successes <= trials:
        raise ValueError(f"wilson interval: successes must be between 0 and trials={trials}, got {successes}")
    from statistics import NormalDist  # imported here: the up-to-date checks import this module

    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    squared = z * z
    centre = (successes + squared / 2.0) / (trials + squared)
    half = z / (trials + squared) * math.sqrt(successes * (trials - successes) / trials + squared / 4.0)
    low = 0.0 if successes == 0 else centre - half
    high = 1.0 if successes == trials else centre + half
    return Interval.clipped(low, high)


def clustered_se(clusters: Iterable[tuple[float, int]], estimate: float, total: int) -> float:
    """sqrt(sum over clusters of (cluster sum - estimate * cluster size)^2) / total, each cluster given as
    (sum of its observations, its number of observations)."""
    squares = math.fsum((value - estimate * size) ** 2 for value, size in clusters)
    return math.sqrt(squares) / total


def clustered_step_rate(tallies: Sequence[ProblemTally]) -> StepRate:
    """The subproblem pass rate with the standard error clustered by problem (see the module docstring)."""
    steps = sum(tally.steps_scored for tally in tallies)
    passed = sum(tally.steps_passed for tally in tallies)
    if steps <= 0:
        return StepRate(passed, steps, len(tallies), None, None)
    rate = passed / steps
    se = clustered_se(((tally.steps_passed, tally.steps_scored) for tally in tallies), rate, steps)
    return StepRate(passed, steps, len(tallies), se, Interval.clipped(rate - Z_95 * se, rate + Z_95 * se))


def resolve_rate(tallies: Sequence[ProblemTally]) -> ResolveRate:
    resolved = sum(tally.resolved for tally in tallies)
    return ResolveRate(resolved, len(tallies), wilson_interval(resolved, len(tallies)))


def headline_intervals(tallies: Sequence[ProblemTally]) -> HeadlineIntervals:
    return HeadlineIntervals(resolve_rate(tallies), clustered_step_rate(tallies))


def group_intervals(tallies: Sequence[ProblemTally], minimum: int = MIN_GROUP_PROBLEMS) -> HeadlineIntervals | None:
    """The intervals of a group (a field, a subfield, a split) with at least `minimum` problems; else None."""
    return headline_intervals(tallies) if len(tallies) >= minimum else None


# ---------------------------------------------------------------------------
# Bootstrap over problems
# ---------------------------------------------------------------------------


def bootstrap_mean_intervals(
    columns: Sequence[Sequence[float]],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = LEVEL,
) -> list[Interval]:
    """For each column of per-problem values (all of the same problems, in the same order), the percentile
    interval of its mean over `resamples` resamples of the problems with replacement. Every column uses the
    same resamples (drawn once from `default_rng(seed)`)."""
    import numpy as np

    if not columns:
        return []
    count = len(columns[0])
    if count == 0 or any(len(column) != count for column in columns):
        raise ValueError("bootstrap: every column needs the same, non-zero number of problems")
    if resamples < 1:
        raise ValueError(f"bootstrap: resamples must be >= 1, got {resamples}")
    picks = np.random.default_rng(seed).integers(0, count, size=(resamples, count))
    tail = 100.0 * (1.0 - level) / 2.0
    intervals = []
    for column in columns:
        means = np.asarray(column, dtype=float)[picks].mean(axis=1)
        low, high = np.percentile(means, [tail, 100.0 - tail])
        intervals.append(Interval.clipped(float(low), float(high)))
    return intervals


def bootstrap_record(resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> dict[str, Any]:
    return {"method": PASS_AT_K_METHOD, "resamples": resamples, "seed": seed, "level": LEVEL}


def methods_record() -> dict[str, Any]:
    """What summary.json's intervals mean (`uncertainty`)."""
    return {
        "level": LEVEL,
        "main_problem_resolve_rate": "Wilson score interval over problems (scipy binomtest proportion_ci)",
        "subproblem": (
            "p +- 1.96 SE clipped to [0, 1], SE = sqrt(sum over problems of (passed - p * steps)^2) / steps "
            "(clustered by problem; E. Miller, Adding Error Bars to Evals, 2024)"
        ),
        "pass_at_k": bootstrap_record(),
        "min_group_problems": MIN_GROUP_PROBLEMS,
    }
