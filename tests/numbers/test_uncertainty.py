"""The error bars and paired tests (stages.numbers.uncertainty) against values computed by hand and against scipy and
statsmodels, at 0%, at 100% and for a single problem, with no interval ever a single point.

Each hand computation is written out beside its check; z = 1.959964 is the 97.5% normal quantile (scipy's and
statsmodels' Wilson interval use it too), z^2 = 3.841459."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stages.numbers.passk import mean_pass_at_k, pass_at_k_interval, pass_at_k_intervals
from stages.numbers.uncertainty.intervals import (
    Z_95,
    Interval,
    ProblemTally,
    clustered_step_rate,
    effective_size,
    group_intervals,
    headline_intervals,
    interval_methods,
    methods_record,
    wilson_interval,
    wilson_score,
)
from stages.numbers.uncertainty.paired import (
    PairedProblem,
    mcnemar,
    mcnemar_exact_p,
    newcombe_difference,
    noise_verdict,
    step_difference,
)


def tallies(*steps: tuple[int, int]) -> list[ProblemTally]:
    """(passed, scored) per problem; resolved when every scored step passed."""
    return [ProblemTally(passed == scored and scored > 0, passed, scored) for passed, scored in steps]


def bounds(interval: Interval | None) -> tuple[float, float]:
    """(low, high) of `interval`, to compare with the expected bounds (each exact or `pytest.approx`)."""
    assert interval is not None
    return interval.low, interval.high


def close(interval: Interval | None) -> object:
    """The bounds of `interval` up to rounding, to compare with `bounds(...)`."""
    return pytest.approx(bounds(interval), abs=1e-12)


def width(interval: Interval | None) -> float:
    assert interval is not None
    return interval.high - interval.low


def test_z_is_the_normal_quantile() -> None:
    from scipy.stats import norm

    assert Z_95 == pytest.approx(NormalDist().inv_cdf(0.975), abs=1e-15)
    assert Z_95 == pytest.approx(float(norm.ppf(0.975)), abs=1e-15)


# ---------------------------------------------------------------------------
# Wilson interval of the resolve rate
# ---------------------------------------------------------------------------


def test_wilson_two_of_five_by_hand() -> None:
    # r = 2, n = 5, z = 1.959964, z^2 = 3.841459
    # centre = (r + z^2/2) / (n + z^2) = (2 + 1.920729) / 8.841459 = 0.443449
    # half   = z / (n + z^2) * sqrt(r (n - r) / n + z^2 / 4) = 0.221679 * sqrt(1.2 + 0.960365)
    #        = 0.221679 * 1.469818 = 0.325828
    # interval = [0.443449 - 0.325828, 0.443449 + 0.325828] = [0.117621, 0.769277]
    interval = wilson_interval(2, 5)
    assert interval is not None
    assert interval.low == pytest.approx(0.117621, abs=2e-6)
    assert interval.high == pytest.approx(0.769277, abs=2e-6)


def test_wilson_none_resolved_by_hand() -> None:
    # r = 0, n = 5: centre = 1.920729 / 8.841459 = 0.217242, half = 0.221679 * sqrt(0.960365) = 0.217242
    # interval = [0, 0.434484]: never below zero, and not the empty interval a normal approximation gives
    interval = wilson_interval(0, 5)
    assert interval is not None
    assert interval.low == pytest.approx(0.0, abs=1e-12)
    assert interval.high == pytest.approx(0.434484, abs=2e-6)


@given(st.integers(1, 400).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_is_scipys_binomtest_interval(case: tuple[int, int]) -> None:
    from scipy.stats import binomtest

    successes, trials = case
    expected = binomtest(successes, trials).proportion_ci(confidence_level=0.95, method="wilson")
    found = wilson_interval(successes, trials)
    assert found is not None
    assert found.low == pytest.approx(float(expected.low), abs=1e-12)
    assert found.high == pytest.approx(float(expected.high), abs=1e-12)


def test_wilson_without_trials_is_none_and_bad_counts_are_refused() -> None:
    assert wilson_interval(0, 0) is None
    with pytest.raises(ValueError, match="between 0 and trials=3"):
        wilson_interval(4, 3)


# ---------------------------------------------------------------------------
# Subproblem pass rate: the clustered Wilson interval
# ---------------------------------------------------------------------------


def test_clustered_wilson_without_design_effect_by_hand() -> None:
    # problems (passed, steps): (2, 3), (0, 2), (1, 1): N = 6, p = 3/6 = 0.5
    # per problem passed - p * steps: 2 - 1.5 = 0.5, 0 - 1.0 = -1.0, 1 - 0.5 = 0.5
    # V_cl = (0.25 + 1.0 + 0.25) / 36 = 0.041667 (SE 0.204124); V_bin = 0.25 / 6 = 0.041667: deff = 1, n_eff = 6
    # Wilson of 0.5 on 6: centre 0.5, half = z / (6 + z^2) * sqrt(1.5 + z^2/4) = 0.199154 * 1.568555 = 0.312384
    # interval [0.187616, 0.812384] (the plain Wilson interval of 3 of 6)
    rate = clustered_step_rate(tallies((2, 3), (0, 2), (1, 1)))
    assert (rate.passed, rate.steps, rate.problems) == (3, 6, 3)
    assert rate.rate == 0.5
    assert rate.se == pytest.approx(0.204124, abs=1e-6)
    assert rate.size is not None and rate.size.effective == pytest.approx(6.0) and rate.size.estimated
    assert rate.interval is not None
    assert rate.interval.low == pytest.approx(0.187616, abs=1e-6)
    assert rate.interval.high == pytest.approx(0.812384, abs=1e-6)


def test_clustering_shrinks_the_effective_sample_when_steps_of_a_problem_agree() -> None:
    # (3, 3), (0, 3): N = 6, p = 0.5; sums 3 - 1.5 = 1.5 and 0 - 1.5 = -1.5
    # V_cl = 4.5 / 36 = 0.125, V_bin = 0.041667: deff = 3 = sum steps^2 / N = 18 / 6 (its upper bound): n_eff = 2
    # Wilson of 0.5 on 2: half = z / (1 + z^2/2) * sqrt(0.25/2 + z^2/16) = 0.671050 * 0.604228 = 0.405469
    # interval [0.094531, 0.905469], where 6 independent steps would give [0.187616, 0.812384]
    rate = clustered_step_rate(tallies((3, 3), (0, 3)))
    assert rate.se == pytest.approx(0.353553, abs=1e-6)
    assert rate.size is not None and rate.size.effective == pytest.approx(2.0)
    assert rate.size.design_effect == pytest.approx(3.0)
    assert bounds(rate.interval) == (pytest.approx(0.094531, abs=1e-6), pytest.approx(0.905469, abs=1e-6))


def test_the_design_effect_is_bounded_by_whole_problems() -> None:
    # six one-step problems failed, one three-step problem passed: N = 9, p = 1/3
    # sums: six times -1/3 and 3 - 1 = 2: V_cl = (6/9 + 4) / 81 = 0.057613, V_bin = (2/9) / 9 = 0.024691
    # raw deff = 2.333333 > sum steps^2 / N = (6 + 9) / 9 = 1.666667, so deff = 1.666667 and n_eff = the Kish
    # effective number of problems 81 / 15 = 5.4 (never fewer, whatever the clustered variance says)
    rate = clustered_step_rate(tallies(*([(0, 1)] * 6), (3, 3)))
    assert rate.size is not None and rate.size.effective == pytest.approx(5.4)
    assert bounds(rate.interval) == close(wilson_score(1 / 3, 5.4))
    # and never more than the steps: two problems at 1 of 2 each have V_cl = 0 (deff 0, bounded to 1): n_eff = 4
    half = clustered_step_rate(tallies((1, 2), (1, 2)))
    assert half.size is not None and half.size.effective == 4.0
    assert bounds(half.interval) == (pytest.approx(0.150039, abs=1e-6), pytest.approx(0.849961, abs=1e-6))


def test_no_step_passed_is_not_a_zero_width_interval() -> None:
    # 0 of 2 steps (the issue's `0.0% to 0.0%`): the design effect cannot be estimated at p = 0, so n_eff is the
    # number of problems, 2: [0, z^2 / (2 + z^2)] = [0, 3.841459 / 5.841459] = [0, 0.657620]
    rate = clustered_step_rate(tallies((0, 1), (0, 1)))
    assert bounds(rate.interval) == (0.0, pytest.approx(0.657620, abs=1e-6))
    assert rate.size is not None and not rate.size.estimated and rate.size.effective == 2
    # the same two problems with more steps (0 of 5) are still two problems' worth of evidence
    assert clustered_step_rate(tallies((0, 3), (0, 2))).interval == rate.interval


def test_every_step_passed_is_not_a_zero_width_interval() -> None:
    # 5 of 5 steps over 2 problems: n_eff = 2, [2 / (2 + z^2), 1] = [0.342380, 1]
    rate = clustered_step_rate(tallies((2, 2), (3, 3)))
    assert bounds(rate.interval) == (pytest.approx(0.342380, abs=1e-6), 1.0)
    # the self-test: 50 of 50 steps over 15 problems of 11, 8, 4, 4, 4, 3, 3, 3, 3, 2, 1, 1, 1, 1, 1 steps:
    # n_eff = 15, the resolve rate's 15 of 15: [15 / (15 + z^2), 1] = [0.796117, 1]
    sizes = (11, 8, 4, 4, 4, 3, 3, 3, 3, 2, 1, 1, 1, 1, 1)
    self_test = clustered_step_rate(tallies(*((size, size) for size in sizes)))
    assert self_test.steps == 50
    assert bounds(self_test.interval) == (pytest.approx(0.796117, abs=1e-6), 1.0)


def test_a_single_problem_counts_as_one_outcome() -> None:
    # one problem, 2 of 3 steps: its clustered variance is 0 whatever happened, so n_eff = 1:
    # centre = (2/3 + z^2/2) / (1 + z^2) = 2.587396 / 4.841459 = 0.534426,
    # half = z / (1 + z^2) * sqrt(2/9 + z^2/4) = 0.404828 * 1.087468 = 0.440238 -> [0.094188, 0.974664]
    rate = clustered_step_rate(tallies((2, 3)))
    assert bounds(rate.interval) == (pytest.approx(0.094186, abs=2e-6), pytest.approx(0.974664, abs=2e-6))
    # one problem, every step passed (the golden run): [1 / (1 + z^2), 1] = [0.206549, 1]
    assert bounds(clustered_step_rate(tallies((2, 2))).interval) == (pytest.approx(0.206549, abs=1e-6), 1.0)


def test_no_scored_step_has_no_interval() -> None:
    rate = clustered_step_rate([])
    assert (rate.rate, rate.se, rate.interval, rate.size) == (None, None, None, None)
    assert effective_size([(0, 0)]) is None


steps_per_problem = st.lists(
    st.integers(0, 12).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))), min_size=1, max_size=40
)


@given(steps_per_problem)
def test_clustered_wilson_is_statsmodels_wilson_on_the_effective_n(pairs: list[tuple[int, int]]) -> None:
    from statsmodels.stats.proportion import proportion_confint

    rate = clustered_step_rate(tallies(*pairs))
    if rate.steps == 0:
        return
    assert rate.size is not None and rate.interval is not None and rate.rate is not None
    effective = rate.size.effective
    low, high = proportion_confint(rate.rate * effective, effective, alpha=0.05, method="wilson")
    assert rate.interval.low == pytest.approx(float(low), abs=1e-12)
    assert rate.interval.high == pytest.approx(float(high), abs=1e-12)


@given(steps_per_problem.filter(lambda pairs: sum(1 for _, n in pairs if n) >= 2))
def test_the_design_effect_uses_statsmodels_cluster_robust_variance(pairs: list[tuple[int, int]]) -> None:
    """V_cl is the cluster-robust variance of a mean (no small-sample factor); deff = V_cl / V_bin, bounded."""
    import statsmodels.api as sm

    outcomes = np.array([x for passed, n in pairs for x in [1.0] * passed + [0.0] * (n - passed)])
    groups = np.array([i for i, (_, n) in enumerate(pairs) for _ in range(n)])
    rate = clustered_step_rate(tallies(*pairs))
    assert rate.size is not None and rate.rate is not None
    if rate.rate in (0.0, 1.0):
        assert rate.size.effective == sum(1 for _, n in pairs if n) and not rate.size.estimated
        return
    fit = sm.OLS(outcomes, np.ones(len(outcomes))).fit(
        cov_type="cluster", cov_kwds={"groups": groups, "use_correction": False}
    )
    clustered = float(fit.bse[0]) ** 2
    total = len(outcomes)
    raw = clustered / (rate.rate * (1 - rate.rate) / total)
    bounded = min(max(raw, 1.0), sum(n * n for _, n in pairs) / total)
    assert rate.se == pytest.approx(math.sqrt(clustered), rel=1e-9, abs=1e-12)
    assert rate.size.design_effect == pytest.approx(bounded, rel=1e-9)


def test_groups_below_five_problems_get_no_interval() -> None:
    assert group_intervals(tallies((1, 1), (0, 1), (1, 2), (2, 2))) is None
    five = group_intervals(tallies((1, 1), (0, 1), (1, 2), (2, 2), (0, 3)))
    assert five is not None and five.resolve.resolved == 2 and five.resolve.problems == 5
    # a field whose five problems all failed still gets intervals of width: [0, 5 problems' Wilson]
    failed = group_intervals(tallies(*([(0, 2)] * 5)))
    assert failed is not None and width(failed.steps.interval) > 0 and width(failed.resolve.interval) > 0
    assert bounds(failed.steps.interval) == close(wilson_interval(0, 5))


def test_headline_record_names_methods_and_counts() -> None:
    record = headline_intervals(tallies((2, 3), (0, 2), (1, 1))).recorded()
    assert record.main_problem_resolve_rate.method == "wilson"
    assert record.main_problem_resolve_rate.problems == 3
    steps = record.subproblem
    assert steps.method == "clustered_wilson" and steps.steps == 6
    assert steps.se == pytest.approx(0.204124, abs=1e-6)
    assert (steps.effective_n, steps.design_effect, steps.design_effect_estimated) == (
        pytest.approx(6.0),
        pytest.approx(1.0),
        True,
    )
    assert list(record.subproblem.to_record()) == [
        "estimate",
        "se",
        "low",
        "high",
        "method",
        "problems",
        "steps",
        "effective_n",
        "design_effect",
        "design_effect_estimated",
    ]
    assert headline_intervals([]).recorded().subproblem.effective_n is None
    methods = interval_methods()
    assert "clustered Wilson" in methods.steps and methods.pass_at_k.method == "clustered_wilson"
    assert methods_record() == methods.to_record()


@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), min_size=1, max_size=40))
def test_intervals_hold_their_estimate_stay_in_range_and_have_width(pairs: list[tuple[int, int]]) -> None:
    problems = tallies(*((min(a, b), b) for a, b in pairs))
    found = headline_intervals(problems)
    resolve = found.resolve
    assert resolve.interval is not None and resolve.rate is not None
    assert 0.0 <= resolve.interval.low <= resolve.rate <= resolve.interval.high <= 1.0
    assert width(resolve.interval) > 0
    steps = found.steps
    if steps.steps:
        assert steps.interval is not None and steps.rate is not None and steps.se is not None and steps.se >= 0
        assert 0.0 <= steps.interval.low <= steps.rate <= steps.interval.high <= 1.0
        assert width(steps.interval) > 0
        assert steps.size is not None and 1 <= steps.size.effective <= steps.steps


def test_clustered_wilson_covers_near_the_boundary_where_the_wald_interval_did_not() -> None:
    """Seeded simulation: 40 problems of 1 to 8 steps, each problem's pass probability drawn from a Beta of mean
    2% (its steps share it), 1000 runs. The clustered Wilson interval holds the true rate in about 95% of them;
    the Wald-type p +- 1.96 SE it replaces, which is 0 to 0 whenever no step passes, in about 71%."""
    rng = np.random.default_rng(20240517)
    mean, concentration, covered, wald = 0.02, 2.0, 0, 0
    runs = 1000
    for _ in range(runs):
        sizes = rng.integers(1, 9, 40)
        passed = rng.binomial(sizes, rng.beta(mean * concentration, (1 - mean) * concentration, 40))
        rate = clustered_step_rate(tallies(*zip(passed.tolist(), sizes.tolist())))
        assert rate.interval is not None and rate.rate is not None and rate.se is not None
        covered += rate.interval.low <= mean <= rate.interval.high
        wald += rate.rate - 1.96 * rate.se <= mean <= rate.rate + 1.96 * rate.se
    assert 0.93 <= covered / runs <= 0.99
    assert wald / runs < 0.8


# ---------------------------------------------------------------------------
# pass@k: the clustered Wilson interval over draws of k attempts
# ---------------------------------------------------------------------------


def test_pass_at_k_intervals_by_hand() -> None:
    # n = 2 attempts per problem; c = 2, 1, 0: pass@1 = 1, 0.5, 0; pass@2 = 1, 1, 0
    # pass@1: each problem is 2 draws of 1 attempt, resolving 2, 1, 0 of them: N = 6, p = 0.5,
    #   V_cl = (1 + 0 + 1) / 36 = 0.055556, V_bin = 0.041667, deff = 1.333333 (bound 12 / 6 = 2): n_eff = 4.5
    # pass@2: one draw each, 1, 1, 0: the Wilson interval of 2 of 3
    found = pass_at_k_intervals([(2, 2), (2, 1), (2, 0)], [1, 2])
    assert bounds(found[1]) == close(wilson_score(0.5, 4.5))
    assert bounds(found[1]) == (pytest.approx(0.160690, abs=1e-6), pytest.approx(0.839310, abs=1e-6))
    assert bounds(found[2]) == close(wilson_interval(2, 3))


def test_pass_at_k_of_identical_problems_is_not_a_point() -> None:
    # every problem resolved in 1 of its 2 attempts: pass@1 = 0.5 everywhere, so the bootstrap over problems it
    # replaces gave [0.5, 0.5]; the draws (2 per problem) vary within problems: n_eff = 6, Wilson of 3 of 6
    assert bounds(pass_at_k_interval([(2, 1)] * 3, 1)) == close(wilson_interval(3, 6))
    # pass@2 is 1 for each: 3 of 3 problems, [3 / (3 + z^2), 1] = [0.438503, 1]
    assert bounds(pass_at_k_interval([(2, 1)] * 3, 2)) == (pytest.approx(0.438503, abs=1e-6), 1.0)


def test_pass_at_k_at_zero_at_one_and_for_one_problem() -> None:
    # no attempt resolved anything (0/n) or every attempt did (n/n): the number of problems' Wilson interval
    assert bounds(pass_at_k_interval([(3, 0)] * 4, 1)) == close(wilson_interval(0, 4))
    assert bounds(pass_at_k_interval([(3, 3)] * 4, 2)) == close(wilson_interval(4, 4))
    # one problem, 1 of 3 attempts: pass@1 = 1/3 on one problem: n_eff = 1
    single = pass_at_k_interval([(3, 1)], 1)
    assert bounds(single) == close(wilson_score(1 / 3, 1)) and width(single) > 0.5


@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=30),
    st.integers(1, 5),
)
def test_pass_at_k_intervals_hold_the_mean_and_have_width(resolved: list[int], k: int) -> None:
    attempts = 5
    counts = [(attempts, c) for c in resolved]
    estimate = mean_pass_at_k(counts, k)
    interval = pass_at_k_interval(counts, k)
    assert 0.0 <= interval.low <= estimate + 1e-12 and estimate - 1e-12 <= interval.high <= 1.0
    assert width(interval) > 0


# ---------------------------------------------------------------------------
# Paired tests
# ---------------------------------------------------------------------------


def test_mcnemar_exact_by_hand() -> None:
    # one run alone resolved 1, the other 5: n = 6, p = 2 * (C(6,0) + C(6,1)) / 2^6 = 2 * 7 / 64 = 0.21875
    assert mcnemar_exact_p(1, 5) == pytest.approx(0.21875, abs=1e-12)
    assert mcnemar_exact_p(5, 1) == pytest.approx(0.21875, abs=1e-12)
    # 0 against 5: p = 2 * 1 / 32 = 0.0625 (five problems one way are not enough); 0 against 6: 2 / 64 = 0.03125
    assert mcnemar_exact_p(0, 5) == pytest.approx(0.0625, abs=1e-12)
    assert mcnemar_exact_p(0, 6) == pytest.approx(0.03125, abs=1e-12)
    # equal counts and no discordant pair: p = 1
    assert mcnemar_exact_p(3, 3) == 1.0
    assert mcnemar_exact_p(0, 0) == 1.0


@given(st.integers(0, 60), st.integers(0, 60))
def test_mcnemar_is_scipys_two_sided_binomial_test(only_a: int, only_b: int) -> None:
    from scipy.stats import binomtest

    expected = 1.0 if only_a + only_b == 0 else binomtest(min(only_a, only_b), only_a + only_b, 0.5).pvalue
    assert mcnemar_exact_p(only_a, only_b) == pytest.approx(float(expected), rel=1e-9, abs=1e-15)


def test_mcnemar_counts_the_four_cells() -> None:
    problems = [
        PairedProblem("1", True, True, 1, 1, 1),
        PairedProblem("2", True, False, 2, 1, 2),
        PairedProblem("3", False, True, 0, 1, 1),
        PairedProblem("4", False, True, 0, 2, 2),
        PairedProblem("5", False, False, 0, 0, 3),
    ]
    found = mcnemar(problems)
    assert (found.both, found.neither, found.only_a, found.only_b) == (1, 1, 1, 2)
    # n = 3 discordant, min = 1: p = 2 * (C(3,0) + C(3,1)) / 8 = 2 * 4 / 8 = 1.0
    assert found.p_value == 1.0


def paired(*rows: tuple[int, int, int]) -> list[PairedProblem]:
    """(passed A, passed B, steps) per problem."""
    return [PairedProblem(str(i), a == s, b == s, a, b, s) for i, (a, b, s) in enumerate(rows)]


def test_step_difference_by_hand() -> None:
    # (passed A, passed B, steps): (1, 3, 3), (2, 2, 2), (0, 1, 1): differences 2, 0, 1; N = 6, D = 3/6 = 0.5
    # The test: per problem 2 - 0.5 * 3 = 0.5, 0 - 0.5 * 2 = -1.0, 1 - 0.5 * 1 = 0.5;
    #   SE = sqrt(0.25 + 1.0 + 0.25) / 6 = 0.204124; z = 2.449490, p = 2 * (1 - Phi(2.449490)) = 0.014306.
    # The interval: p_A = 3/6 = 0.5, p_B = 6/6 = 1.
    #   A: sums 1 - 1.5, 2 - 1, 0 - 0.5 = -0.5, 1, -0.5: V_cl = 1.5 / 36 = V_bin: n_eff 6, Wilson [0.187616, 0.812384]
    #   B: p = 1, n_eff = 3 problems: [3 / (3 + z^2), 1] = [0.438503, 1]
    #   phi: B's sums are all 0, so the correlation is undefined: 0.
    #   low = 0.5 - sqrt((1 - 0.438503)^2 + (0.812384 - 0.5)^2) = 0.5 - sqrt(0.315279 + 0.097584) = -0.142544
    #   high = 0.5 + sqrt(0 + (0.5 - 0.187616)^2) = 0.812384
    found = step_difference(paired((1, 3, 3), (2, 2, 2), (0, 1, 1)))
    assert found.difference == 0.5
    assert found.se == pytest.approx(0.204124, abs=1e-6)
    assert found.p_value == pytest.approx(0.014306, abs=1e-6)
    assert found.correlation == 0.0
    assert bounds(found.interval) == (pytest.approx(-0.142544, abs=1e-6), pytest.approx(0.812384, abs=1e-6))
    assert noise_verdict(found.p_value) == "distinguishable from noise"


def test_step_difference_is_newcombes_paired_interval_with_one_step_per_problem() -> None:
    """M. W. Fagerland, S. Lydersen and P. Laake, Statistical Analysis of Contingency Tables (2017), chapter 8:
    complete response before and after consolidation therapy (Cavo et al., 2012), the paired table
    59, 6 / 16, 80: Newcombe's square-and-add interval of the difference is -0.0621 (-0.1186 to -0.0046)."""
    # rows: B (first measurement) passed / failed; columns: A passed / failed
    problems = paired(*([(1, 1, 1)] * 59 + [(0, 1, 1)] * 6 + [(1, 0, 1)] * 16 + [(0, 0, 1)] * 80))
    found = step_difference(problems)
    assert found.difference == pytest.approx(-0.0621, abs=5e-5)
    assert bounds(found.interval) == (pytest.approx(-0.1186, abs=5e-5), pytest.approx(-0.0046, abs=5e-5))


@given(
    st.floats(0.0, 1.0),
    st.floats(0.5, 400.0),
    st.floats(0.0, 1.0),
    st.floats(0.5, 400.0),
)
def test_newcombe_without_correlation_is_statsmodels_independent_newcombe(
    rate_a: float, size_a: float, rate_b: float, size_b: float
) -> None:
    from statsmodels.stats.proportion import confint_proportions_2indep

    found = newcombe_difference(rate_a, wilson_score(rate_a, size_a), rate_b, wilson_score(rate_b, size_b), 0.0)
    low, high = confint_proportions_2indep(rate_b * size_b, size_b, rate_a * size_a, size_a, method="newcomb")
    assert found.low == pytest.approx(max(-1.0, float(low)), abs=1e-9)
    assert found.high == pytest.approx(min(1.0, float(high)), abs=1e-9)


def test_steps_that_all_agree_are_not_a_zero_width_difference() -> None:
    # the issue's `+0.0 to +0.0 pp`: 50 one-step problems, 25 passed by both runs and 25 by neither.
    # Each rate: Wilson of 25 of 50, 0.5 - l = u - 0.5 = z / (50 + z^2) * sqrt(12.5 + z^2/4) = 0.133555. The
    # correlation is 1; less Newcombe's 1 / (2 * 50 * 0.25) = 0.04: phi = 0.96;
    # half width sqrt(2 * 0.133555^2 * (1 - 0.96)) = 0.133555 * 0.282843 = 0.037775
    same = step_difference(paired(*([(1, 1, 1)] * 25 + [(0, 0, 1)] * 25)))
    assert (same.difference, same.se, same.p_value) == (0.0, 0.0, 1.0)
    assert same.correlation == pytest.approx(0.96)
    assert bounds(same.interval) == (pytest.approx(-0.037775, abs=1e-6), pytest.approx(0.037775, abs=1e-6))
    assert noise_verdict(same.p_value) == "not distinguishable from noise"


def test_step_difference_at_zero_at_one_and_for_one_problem() -> None:
    # both runs passed nothing (0/n) over 2 problems: each rate [0, 0.657620], phi 0: [-0.657620, +0.657620]
    nothing = step_difference(paired((0, 0, 2), (0, 0, 1)))
    assert bounds(nothing.interval) == (pytest.approx(-0.657620, abs=1e-6), pytest.approx(0.657620, abs=1e-6))
    # both passed everything (n/n): each [0.342380, 1]: [-0.657620, +0.657620]
    everything = step_difference(paired((2, 2, 2), (1, 1, 1)))
    assert bounds(everything.interval) == close(nothing.interval)
    # one problem, one step, passed by B only: D = 1 and SE = 0: no test is possible, never "p = 0";
    # A: [0, 1 / (1 + z^2)] = [0, 0.793451], B: [0.206549, 1]: low = 1 - sqrt(0.793451^2 + 0.793451^2) -> -0.122
    alone = step_difference(paired((0, 1, 1)))
    assert (alone.difference, alone.se, alone.p_value) == (1.0, 0.0, None)
    assert noise_verdict(alone.p_value).startswith("no test possible")
    assert bounds(alone.interval) == (pytest.approx(1 - math.sqrt(2) * 0.793451, abs=1e-6), 1.0)
    assert step_difference([]).difference is None and step_difference([]).interval is None


@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=30))
def test_step_difference_is_antisymmetric_and_never_a_point(rows: list[tuple[int, int, int]]) -> None:
    problems = [PairedProblem(str(i), False, False, min(a, s), min(b, s), s) for i, (a, b, s) in enumerate(rows)]
    swapped = [PairedProblem(p.problem_id, False, False, p.passed_b, p.passed_a, p.steps) for p in problems]
    forward, backward = step_difference(problems), step_difference(swapped)
    if forward.difference is None:
        assert backward.difference is None
        return
    assert forward.difference == pytest.approx(-(backward.difference or 0.0), abs=1e-12)
    assert forward.se == pytest.approx(backward.se, abs=1e-12)
    assert forward.p_value == backward.p_value or forward.p_value == pytest.approx(backward.p_value, abs=1e-12)
    assert forward.interval is not None and backward.interval is not None
    assert forward.interval.low == pytest.approx(-backward.interval.high, abs=1e-12)
    assert -1.0 <= forward.interval.low <= forward.difference <= forward.interval.high <= 1.0
    assert width(forward.interval) > 0
    assert forward.correlation is not None and -1.0 <= forward.correlation < 1.0


def test_paired_interval_covers_the_true_difference() -> None:
    """Seeded simulation: 40 problems of 1 to 8 steps; a problem's difficulty u ~ Beta(0.25, 0.25) (nearly
    all-or-nothing problems) sets both runs' pass probabilities, 0.02 * 2u for A and 0.06 * 2u for B (means 2% and
    6%), 1000 runs: the interval holds the true difference of 4 pp in about 95% of them."""
    rng = np.random.default_rng(7)
    runs, covered = 1000, 0
    for _ in range(runs):
        sizes = rng.integers(1, 9, 40)
        difficulty = rng.beta(0.25, 0.25, 40)
        passed_a = rng.binomial(sizes, 0.04 * difficulty)
        passed_b = rng.binomial(sizes, 0.12 * difficulty)
        found = step_difference(paired(*zip(passed_a.tolist(), passed_b.tolist(), sizes.tolist())))
        assert found.interval is not None
        covered += found.interval.low <= 0.04 <= found.interval.high
    assert 0.93 <= covered / runs <= 0.99


def test_a_step_difference_is_distinguishable_only_when_its_interval_excludes_zero() -> None:
    """The normal test on the clustered SE and the Newcombe interval can disagree near the boundaries; a difference
    whose interval holds 0 is never called distinguishable, whatever its p."""
    assert noise_verdict(0.01, Interval(0.02, 0.30)) == "distinguishable from noise"
    assert noise_verdict(0.01, Interval(-0.30, -0.02)) == "distinguishable from noise"
    assert noise_verdict(0.01, Interval(-0.01, 0.30)) == "not distinguishable from noise"
    assert noise_verdict(0.20, Interval(0.02, 0.30)) == "not distinguishable from noise"
    assert noise_verdict(0.01) == "distinguishable from noise"  # a test without an interval (McNemar)
