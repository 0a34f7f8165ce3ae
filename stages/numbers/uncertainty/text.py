"""How intervals and p-values are written in summary.md, report.html, the run index and the comparison."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stages.numbers.uncertainty.intervals import CLUSTERED_METHOD, RESOLVE_METHOD, SHORT_NAMES

RESOLVE_SHORT = SHORT_NAMES[RESOLVE_METHOD]  # "Wilson"
CLUSTERED_SHORT = SHORT_NAMES[CLUSTERED_METHOD]  # "clustered Wilson"

# The sentence summary.md, report.html and the run index show beside their intervals.
INTERVALS_SENTENCE = (
    "Intervals are 95%: main_problem_resolve_rate has the Wilson score interval over problems; subproblem (and "
    "pass@k) the clustered Wilson interval, a Wilson score interval on the effective sample size the steps are "
    "worth once clustered by problem (from the effective number of problems up to the number of steps; the "
    "number of problems at 0% and at 100%), so no interval is a single point; see docs/results-and-statistics.md, "
    "Error bars and paired tests."
)


def percent(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{100.0 * value:.{digits}f}%"


def rate_range(low: float | None, high: float | None) -> str:
    """`3.6% to 62.4%` (n/a when unknown)."""
    if low is None or high is None:
        return "n/a"
    return f"{percent(low)} to {percent(high)}"


def interval_of(record: Mapping[str, Any] | None) -> str:
    """The range of an interval record (`{"low", "high", ...}`), n/a when absent."""
    if not record:
        return "n/a"
    return rate_range(record.get("low"), record.get("high"))


def step_interval_label(effective_n: float | None, steps: int | None) -> str:
    """`clustered Wilson, effective n 8.7 of 13 steps`: what follows a step rate's interval (the method alone
    without an effective n)."""
    if effective_n is None or steps is None:
        return CLUSTERED_SHORT
    return f"{CLUSTERED_SHORT}, effective n {effective_n:.1f} of {steps} steps"


def points(value: float | None, digits: int = 1) -> str:
    """A difference of rates in percentage points, its sign always shown: `+6.7 pp`."""
    if value is None:
        return "n/a"
    rounded = round(100.0 * value, digits)
    return f"{rounded if rounded != 0 else 0.0:+.{digits}f} pp"


def points_range(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "n/a"
    return f"{points(low)} to {points(high)}"


def p_text(p_value: float | None) -> str:
    """`p = 0.219`, `p < 0.001`, `p = 1`; `p n/a` when no test was possible."""
    if p_value is None:
        return "p n/a"
    if p_value >= 1.0:
        return "p = 1"
    return "p < 0.001" if p_value < 0.001 else f"p = {p_value:.3f}"
