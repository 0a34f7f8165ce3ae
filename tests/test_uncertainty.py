"""The error bars and paired tests (stages.uncertainty) against values computed by hand.

Each hand computation is written out beside its check; z = 1.959964 is the 97.5% normal quantile scipy's
Wilson interval uses, 1.96 the one the clustered intervals use (as the README states)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stages.passk import pass_at_k_intervals
from stages.uncertainty.intervals import (
    Interval,
    ProblemTally,
    bootstrap_mean_intervals,
    clustered_step_rate,
    group_intervals,
    headline_intervals,
    wilson_interval,
)
from stages.uncertainty.paired import (
    PairedProblem,
    mcnemar,
    mcnemar_exact_p,
    noise_verdict,
    step_difference,
)


def tallies(*steps: tuple[int, int]) -> list[ProblemTally]:
    """(passed, scored) per problem; resolved when every scored step passed."""
    return [ProblemTally(passed == scored and scored > 0, passed, scored) for passed, scored in steps]


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
# Subproblem pass rate with the SE clustered by problem
# ---------------------------------------------------------------------------


def test_clustered_se_by_hand() -> None:
    # problems (passed, steps): (2, 3), (0, 2), (1, 1): N = 6, p = 3/6 = 0.5
    # per problem sum of (x - p) = passed - p * steps: 2 - 1.5 = 0.5, 0 - 1.0 = -1.0, 1 - 0.5 = 0.5
    # SE = sqrt(0.25 + 1.0 + 0.25) / 6 = sqrt(1.5) / 6 = 1.224745 / 6 = 0.204124
    # interval = 0.5 +- 1.96 * 0.204124 = 0.5 +- 0.400083 = [0.099917, 0.900083]
    rate = clustered_step_rate(tallies((2, 3), (0, 2), (1, 1)))
    assert (rate.passed, rate.steps, rate.problems) == (3, 6, 3)
    assert rate.rate == 0.5
    assert rate.se == pytest.approx(0.204124, abs=1e-6)
    assert rate.interval is not None
    assert rate.interval.low == pytest.approx(0.099917, abs=1e-6)
    assert rate.interval.high == pytest.approx(0.900083, abs=1e-6)


def test_clustering_widens_the_interval_when_steps_of_a_problem_agree() -> None:
    # (3, 3), (0, 3): N = 6, p = 0.5; sums 3 - 1.5 = 1.5 and 0 - 1.5 = -1.5
    # SE = sqrt(2.25 + 2.25) / 6 = 2.121320 / 6 = 0.353553, where independent steps would give
    # sqrt(p (1 - p) / N) = sqrt(0.25 / 6) = 0.204124
    rate = clustered_step_rate(tallies((3, 3), (0, 3)))
    assert rate.se == pytest.approx(0.353553, abs=1e-6)
    assert rate.se > math.sqrt(0.25 / 6)


def test_clustered_interval_is_clipped_to_one_by_hand() -> None:
    # (5, 5), (4, 5): N = 10, p = 0.9; sums 5 - 4.5 = 0.5 and 4 - 4.5 = -0.5
    # SE = sqrt(0.5) / 10 = 0.070711; 0.9 + 1.96 * 0.070711 = 1.038593 -> clipped to 1.0
    rate = clustered_step_rate(tallies((5, 5), (4, 5)))
    assert rate.se == pytest.approx(0.070711, abs=1e-6)
    assert rate.interval == Interval(pytest.approx(0.9 - 1.96 * 0.070711, abs=1e-6), 1.0)


def test_no_scored_step_has_no_interval() -> None:
    rate = clustered_step_rate([])
    assert (rate.rate, rate.se, rate.interval) == (None, None, None)


def test_groups_below_five_problems_get_no_interval() -> None:
    assert group_intervals(tallies((1, 1), (0, 1), (1, 2), (2, 2))) is None
    five = group_intervals(tallies((1, 1), (0, 1), (1, 2), (2, 2), (0, 3)))
    assert five is not None and five.resolve.resolved == 2 and five.resolve.problems == 5


def test_headline_record_names_methods_and_counts() -> None:
    record = headline_intervals(tallies((2, 3), (0, 2), (1, 1))).to_record()
    assert record["main_problem_resolve_rate"]["method"] == "wilson"
    assert record["main_problem_resolve_rate"]["problems"] == 3
    assert record["subproblem"]["steps"] == 6 and record["subproblem"]["se"] == pytest.approx(0.204124, abs=1e-6)


@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), min_size=1, max_size=40))
def test_intervals_hold_their_estimate_and_stay_in_range(pairs: list[tuple[int, int]]) -> None:
    problems = tallies(*((min(a, b), b) for a, b in pairs))
    found = headline_intervals(problems)
    resolve = found.resolve
    assert resolve.interval is not None and resolve.rate is not None
    assert 0.0 <= resolve.interval.low <= resolve.rate + 1e-12 and resolve.rate - 1e-12 <= resolve.interval.high <= 1
    steps = found.steps
    if steps.steps:
        assert steps.interval is not None and steps.rate is not None and steps.se is not None and steps.se >= 0
        assert 0.0 <= steps.interval.low <= steps.rate <= steps.interval.high <= 1.0


# ---------------------------------------------------------------------------
# Bootstrap of pass@k over problems
# ---------------------------------------------------------------------------


def test_bootstrap_is_reproducible_with_its_seed_and_changes_with_another() -> None:
    values = [[((7 * i) % 11) / 10 for i in range(30)]]
    first = bootstrap_mean_intervals(values, resamples=2000, seed=7)
    assert first == bootstrap_mean_intervals(values, resamples=2000, seed=7)
    assert first != bootstrap_mean_intervals(values, resamples=2000, seed=8)


def test_bootstrap_of_identical_problems_collapses_to_their_value() -> None:
    assert bootstrap_mean_intervals([[0.25] * 10]) == [Interval(0.25, 0.25)]


def test_bootstrap_of_three_problems_by_hand() -> None:
    # values (0, 0, 1): a resample's mean is K/3 with K ~ Binomial(3, 1/3):
    # P(0) = 8/27 = 0.296, P(1/3) = 12/27 = 0.444, P(2/3) = 6/27 = 0.222, P(1) = 1/27 = 0.037.
    # The 2.5th percentile lies in the first 29.6% (mean 0); the 97.5th in the last 3.7% (mean 1).
    (interval,) = bootstrap_mean_intervals([[0.0, 0.0, 1.0]])
    assert interval == Interval(0.0, 1.0)


def test_bootstrap_of_forty_problems_is_near_the_normal_interval() -> None:
    # 10 of 40 problems resolved: p = 0.25, sqrt(p (1 - p) / 40) = 0.068465, 1.96 * 0.068465 = 0.134191;
    # the percentile interval of the bootstrap distribution is close to [0.115809, 0.384191] (its values
    # are multiples of 1/40 = 0.025, so within one such step)
    (interval,) = bootstrap_mean_intervals([[1.0] * 10 + [0.0] * 30])
    assert interval.low == pytest.approx(0.115809, abs=0.026)
    assert interval.high == pytest.approx(0.384191, abs=0.026)


def test_pass_at_k_intervals_use_each_problems_unbiased_estimate() -> None:
    # n = 2 attempts per problem; c = 2, 1, 0: pass@1 = 1, 0.5, 0; pass@2 = 1, 1, 0
    found = pass_at_k_intervals([(2, 2), (2, 1), (2, 0)], [1, 2], resamples=4000)
    assert found[1].low < 0.5 < found[1].high
    assert found[2].high == 1.0 and found[2].low < 2 / 3
    with pytest.raises(ValueError, match="same, non-zero number"):
        bootstrap_mean_intervals([[1.0], []])


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


def test_step_difference_by_hand() -> None:
    # (passed A, passed B, steps): (1, 3, 3), (2, 2, 2), (0, 1, 1): differences 2, 0, 1; N = 6, D = 3/6 = 0.5
    # per problem: 2 - 0.5 * 3 = 0.5, 0 - 0.5 * 2 = -1.0, 1 - 0.5 * 1 = 0.5
    # SE = sqrt(0.25 + 1.0 + 0.25) / 6 = 0.204124; z = 0.5 / 0.204124 = 2.449490
    # p = 2 * (1 - Phi(2.449490)) = 0.014306; interval 0.5 +- 0.400083 = [0.099917, 0.900083]
    found = step_difference(
        [
            PairedProblem("1", False, True, 1, 3, 3),
            PairedProblem("2", True, True, 2, 2, 2),
            PairedProblem("3", False, True, 0, 1, 1),
        ]
    )
    assert found.difference == 0.5
    assert found.se == pytest.approx(0.204124, abs=1e-6)
    assert found.p_value == pytest.approx(0.014306, abs=1e-6)
    assert found.interval is not None
    assert (found.interval.low, found.interval.high) == (
        pytest.approx(0.099917, abs=1e-6),
        pytest.approx(0.900083, abs=1e-6),
    )
    assert noise_verdict(found.p_value) == "distinguishable from noise"


def test_step_difference_without_variation() -> None:
    same = step_difference([PairedProblem("1", True, True, 2, 2, 2), PairedProblem("2", False, False, 0, 0, 1)])
    assert (same.difference, same.se, same.p_value) == (0.0, 0.0, 1.0)
    assert noise_verdict(same.p_value) == "not distinguishable from noise"
    # one step, one problem, passed by B only: D = 1 and SE = 0: no test is possible, never "p = 0"
    alone = step_difference([PairedProblem("1", False, True, 0, 1, 1)])
    assert (alone.difference, alone.se, alone.p_value) == (1.0, 0.0, None)
    assert noise_verdict(alone.p_value).startswith("no test possible")
    assert step_difference([]).difference is None


@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=30))
def test_step_difference_is_antisymmetric(rows: list[tuple[int, int, int]]) -> None:
    problems = [PairedProblem(str(i), False, False, min(a, s), min(b, s), s) for i, (a, b, s) in enumerate(rows)]
    swapped = [PairedProblem(p.problem_id, False, False, p.passed_b, p.passed_a, p.steps) for p in problems]
    forward, backward = step_difference(problems), step_difference(swapped)
    if forward.difference is None:
        assert backward.difference is None
        return
    assert forward.difference == pytest.approx(-(backward.difference or 0.0), abs=1e-12)
    assert forward.se == pytest.approx(backward.se, abs=1e-12)
    assert forward.p_value == backward.p_value or forward.p_value == pytest.approx(backward.p_value, abs=1e-12)
    assert forward.interval is not None and -1.0 <= forward.interval.low <= forward.interval.high <= 1.0
