"""95% intervals of a run's headline numbers, from per-problem tallies; each is valid at 0% and 100% and never
of zero width from a finite sample.

- Main-problem resolve rate, `r` resolved of `n` problems: the Wilson score interval (E. B. Wilson, 1927; no
  continuity correction), `centre +- half` with `centre = (r + z^2/2) / (n + z^2)` and
  `half = z / (n + z^2) * sqrt(r (n - r) / n + z^2/4)`, z the 97.5% normal quantile: the value of
  `scipy.stats.binomtest(r, n).proportion_ci(method="wilson")` (the tests check they agree), computed here
  without importing scipy.stats (seconds of import per summary). At r = 0 its upper end is z^2 / (n + z^2) > 0.
- Subproblem pass rate `p = (sum of passed steps) / N` over N scored steps: the steps of one problem are not
  independent (they share the problem and carry each other's code), so the interval is the *clustered Wilson*
  interval: the Wilson score interval of p on the effective sample size `n_eff = N / deff` that the clustering
  leaves (L. Kish, Survey Sampling, 1965; E. L. Korn and B. I. Graubard, Survey Methodology 24, 1998, put a
  binomial interval on such an effective size). The design effect `deff = V_cl / V_bin` compares the variance
  of p clustered by problem (E. Miller, "Adding Error Bars to Evals", 2024)

      V_cl = sum over problems i of (passed_i - p * steps_i)^2 / N^2

  with the binomial one, `V_bin = p (1 - p) / N`. It is bounded to `[1, sum_i steps_i^2 / N]`: never more
  information than N independent steps, never less than whole problems whose steps all pass or fail together
  (the variance of p is then largest, and `n_eff` is the Kish effective number of problems
  `N^2 / sum_i steps_i^2`, the number of problems when they have equal step counts). Where the design effect
  cannot be estimated it is taken as if whole problems moved together: at p = 0 or 1 (V_cl and V_bin are both 0)
  `n_eff` is the number of problems, since every problem failing (or passing) is then as likely as a single
  outcome per problem failing (or passing), whatever their step counts; with one problem (V_cl is 0 whatever
  the outcomes) `n_eff` is 1. With one step per problem `n_eff = N` and this is the plain Wilson interval.
- pass@k: the mean over problems of each problem's unbiased pass@k (`stages.numbers.passk`). With `a` attempts a problem
  holds `floor(a / k)` disjoint draws of k attempts, of which its pass@k times that many resolve it; the mean is
  then a proportion of draws clustered by problem and gets the same clustered Wilson interval
  (`stages.numbers.passk.pass_at_k_intervals`): `n_eff` lies between the number of problems (as for pass@a, each problem
  one 0/1 outcome) and problems * floor(a / k) (as for pass@1, every attempt independent).
- Groups (a field, a subfield, a split) get intervals only with at least `MIN_GROUP_PROBLEMS` problems; a
  smaller group shows its counts only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from stages.records.declared import Declared
from stages.records.summary import IntervalMethods, Intervals, PassAtKMethod, ResolveInterval, StepInterval
from stages.storage.json_values import JSONObject

LEVEL = 0.95
Z_95 = 1.959963984540054  # the 97.5% normal quantile, statistics.NormalDist().inv_cdf(0.975) (the tests check it)
MIN_GROUP_PROBLEMS = 5
RESOLVE_METHOD = "wilson"
CLUSTERED_METHOD = "clustered_wilson"  # the step rate's and pass@k's
SHORT_NAMES = {RESOLVE_METHOD: "Wilson", CLUSTERED_METHOD: "clustered Wilson"}  # as tables and the terminal say


@dataclass(frozen=True)
class Interval(Declared):
    """A closed interval [low, high] of a rate (95% unless stated)."""

    low: float
    high: float

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
class EffectiveSize:
    """How many independent trials a proportion clustered by problem is worth: `effective = trials / deff`."""

    trials: float  # N: steps (or draws of k attempts)
    effective: float  # n_eff
    estimated: bool  # False where the design effect could not be estimated (n_eff is then the number of problems)

    @property
    def design_effect(self) -> float:
        return self.trials / self.effective


@dataclass(frozen=True)
class ResolveRate:
    """Resolved problems over problems, with the Wilson interval (None when there is no problem)."""

    resolved: int
    problems: int
    interval: Interval | None

    @property
    def rate(self) -> float | None:
        return self.resolved / self.problems if self.problems else None

    def recorded(self) -> ResolveInterval:
        """As summary.json records it (`stages.records.summary.ResolveInterval`)."""
        return ResolveInterval(
            self.rate,
            self.interval.low if self.interval else None,
            self.interval.high if self.interval else None,
            RESOLVE_METHOD,
            self.problems,
        )


@dataclass(frozen=True)
class StepRate:
    """Passed steps over scored steps, with the problem-clustered standard error, the effective sample size and
    the clustered Wilson interval (None without a scored step)."""

    passed: int
    steps: int
    problems: int
    se: float | None
    interval: Interval | None
    size: EffectiveSize | None = None

    @property
    def rate(self) -> float | None:
        return self.passed / self.steps if self.steps else None

    def recorded(self) -> StepInterval:
        """As summary.json records it (`stages.records.summary.StepInterval`); no effective size without a step."""
        return StepInterval(
            estimate=self.rate,
            se=self.se,
            low=self.interval.low if self.interval else None,
            high=self.interval.high if self.interval else None,
            method=CLUSTERED_METHOD,
            problems=self.problems,
            steps=self.steps,
            effective_n=self.size.effective if self.size else None,
            design_effect=self.size.design_effect if self.size else None,
            design_effect_estimated=self.size.estimated if self.size else None,
        )


@dataclass(frozen=True)
class HeadlineIntervals:
    """The two headline rates of a group of problems with their intervals."""

    resolve: ResolveRate
    steps: StepRate

    def recorded(self) -> Intervals:
        return Intervals(self.resolve.recorded(), self.steps.recorded())


# ---------------------------------------------------------------------------
# The estimators
# ---------------------------------------------------------------------------


def wilson_score(proportion: float, trials: float, z: float = Z_95) -> Interval:
    """The Wilson score interval of `proportion` observed on `trials` (> 0, possibly fractional) trials. Its ends
    are exactly 0 at proportion 0 and exactly 1 at proportion 1 (no rounding past the boundary)."""
    if not trials > 0:
        raise ValueError(f"wilson interval: trials must be > 0, got {trials}")
    if not 0.0 <= proportion <= 1.0:
        raise ValueError(f"wilson interval: the proportion must be between 0 and 1, got {proportion}")
    squared = z * z / trials
    centre = (proportion + squared / 2.0) / (1.0 + squared)
    half = z / (1.0 + squared) * math.sqrt(proportion * (1.0 - proportion) / trials + squared / (4.0 * trials))
    low = 0.0 if proportion == 0.0 else centre - half
    high = 1.0 if proportion == 1.0 else centre + half
    return Interval.clipped(low, high)


def _z(level: float) -> float:
    if level == LEVEL:
        return Z_95
    from statistics import NormalDist  # imported here: the up-to-date checks import this module

    return NormalDist().inv_cdf(0.5 + level / 2.0)


def wilson_interval(successes: int, trials: int, level: float = LEVEL) -> Interval | None:
    """The Wilson score interval of `successes` out of `trials` (None for no trial)."""
    if trials <= 0:
        return None
    if not 0 <= successes <= trials:
        raise ValueError(f"wilson interval: successes must be between 0 and trials={trials}, got {successes}")
    return wilson_score(successes / trials, trials, _z(level))


def clustered_se(clusters: Iterable[tuple[float, int]], estimate: float, total: int) -> float:
    """sqrt(sum over clusters of (cluster sum - estimate * cluster size)^2) / total, each cluster given as
    (sum of its observations, its number of observations)."""
    squares = math.fsum((value - estimate * size) ** 2 for value, size in clusters)
    return math.sqrt(squares) / total


def effective_size(clusters: Sequence[tuple[float, int]]) -> EffectiveSize | None:
    """The effective sample size of a proportion clustered by problem, each problem given as (its successes, which
    may be fractional, its trials): `N / deff`, deff bounded to [1, sum size^2 / N]; the number of problems
    where deff cannot be estimated (see the module docstring). None without any trial."""
    sizes = [size for _, size in clusters if size > 0]
    trials = sum(sizes)
    if trials <= 0:
        return None
    rate = math.fsum(value for value, _ in clusters) / trials
    if len(sizes) < 2 or rate <= 0.0 or rate >= 1.0:
        return EffectiveSize(trials, float(len(sizes)), estimated=False)
    fewest = trials * trials / sum(size * size for size in sizes)
    clustered = clustered_se(clusters, rate, trials) ** 2
    binomial = rate * (1.0 - rate) / trials
    design_effect = min(max(clustered / binomial, 1.0), trials / fewest)
    return EffectiveSize(trials, trials / design_effect, estimated=True)


def clustered_wilson(clusters: Sequence[tuple[float, int]]) -> tuple[Interval, EffectiveSize] | None:
    """The clustered Wilson interval of the proportion sum(successes) / sum(trials) and its effective size."""
    size = effective_size(clusters)
    if size is None:
        return None
    rate = min(1.0, max(0.0, math.fsum(value for value, _ in clusters) / size.trials))
    return wilson_score(rate, size.effective), size


def clustered_step_rate(tallies: Sequence[ProblemTally]) -> StepRate:
    """The subproblem pass rate with its clustered SE and clustered Wilson interval (see the module docstring)."""
    steps = sum(tally.steps_scored for tally in tallies)
    passed = sum(tally.steps_passed for tally in tallies)
    clusters = [(tally.steps_passed, tally.steps_scored) for tally in tallies]
    found = clustered_wilson(clusters)
    if found is None:
        return StepRate(passed, steps, len(tallies), None, None)
    se = clustered_se(clusters, passed / steps, steps)
    return StepRate(passed, steps, len(tallies), se, found[0], found[1])


def resolve_rate(tallies: Sequence[ProblemTally]) -> ResolveRate:
    resolved = sum(tally.resolved for tally in tallies)
    return ResolveRate(resolved, len(tallies), wilson_interval(resolved, len(tallies)))


def headline_intervals(tallies: Sequence[ProblemTally]) -> HeadlineIntervals:
    return HeadlineIntervals(resolve_rate(tallies), clustered_step_rate(tallies))


def group_intervals(tallies: Sequence[ProblemTally], minimum: int = MIN_GROUP_PROBLEMS) -> HeadlineIntervals | None:
    """The intervals of a group (a field, a subfield, a split) with at least `minimum` problems; else None."""
    return headline_intervals(tallies) if len(tallies) >= minimum else None


# ---------------------------------------------------------------------------
# What the intervals are, as summary.json records it
# ---------------------------------------------------------------------------

RESOLVE_DESCRIPTION = (
    "Wilson score interval over problems, no continuity correction (E. B. Wilson, 1927; the value of scipy "
    "binomtest proportion_ci(method='wilson'))"
)
STEP_DESCRIPTION = (
    "clustered Wilson: the Wilson score interval of p = passed / N steps on the effective sample size "
    "n_eff = N / deff (Kish 1965; Korn and Graubard 1998), deff = V_cl / V_bin, V_cl = sum over problems of "
    "(passed - p * steps)^2 / N^2 (clustered by problem; E. Miller, Adding Error Bars to Evals, 2024), "
    "V_bin = p (1 - p) / N; deff bounded to [1, sum steps^2 / N] (n_eff between the Kish effective number of "
    "problems N^2 / sum steps^2 and N); where it cannot be estimated (p = 0 or 1, or one problem) n_eff is the "
    "number of problems; se is sqrt(V_cl)"
)
PASS_AT_K_DESCRIPTION = (
    "clustered Wilson over draws: a problem with a attempts is floor(a / k) draws of k attempts, its unbiased "
    "pass@k times that many of them resolving it; the mean pass@k is the proportion of resolving draws, with "
    "the step rate's clustered Wilson interval, problems as clusters (n_eff between the number of problems and "
    "problems * floor(a / k))"
)


PASS_AT_K_METHOD = PassAtKMethod(CLUSTERED_METHOD, LEVEL, PASS_AT_K_DESCRIPTION)


def pass_at_k_method_record() -> JSONObject:
    return PASS_AT_K_METHOD.to_record()


def interval_methods() -> IntervalMethods:
    """What summary.json's intervals mean (`uncertainty`)."""
    return IntervalMethods(
        level=LEVEL,
        resolve=RESOLVE_DESCRIPTION,
        steps=STEP_DESCRIPTION,
        pass_at_k=PASS_AT_K_METHOD,
        min_group_problems=MIN_GROUP_PROBLEMS,
    )


def methods_record() -> JSONObject:
    """`interval_methods` as JSON (the summary's fingerprint covers it)."""
    return interval_methods().to_record()
