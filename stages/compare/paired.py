"""The paired part of `compare`: two runs on the problems both scored, attempt 1 (as the headline).

A problem is *scored* in a run when its details are readable and its generation did not fail (state
`complete`): its verdicts are the model's outcome. Problems scored by only one run are listed, never compared.
On the problems both scored, `stages.numbers.uncertainty.paired` gives the exact McNemar test on resolved problems and
the paired difference of step pass rates (Newcombe's hybrid score interval from both runs' clustered Wilson
intervals, the test on the SE clustered by problem); step pass rates are compared on the scored steps both runs'
selections list. The comparison's first line states both p-values and calls a difference
distinguishable from noise only where p < 0.05 (and, for the step difference, its interval excludes 0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from stages.numbers.metrics import Metrics
from stages.numbers.rows import ProblemRow
from stages.numbers.uncertainty.intervals import Interval, headline_intervals
from stages.numbers.uncertainty.paired import (
    STEP_DIFFERENCE_SHORT,
    McNemar,
    PairedProblem,
    StepDifference,
    mcnemar,
    noise_verdict,
    step_difference,
)
from stages.numbers.uncertainty.text import CLUSTERED_SHORT, RESOLVE_SHORT, p_text, points, points_range
from stages.records.results import ERROR_STATES, SelectionEntry


def is_scored(problem: ProblemRow) -> bool:
    """The run has the model's verdicts for this problem (readable details, generation not failed)."""
    return problem.state not in ERROR_STATES


@dataclass(frozen=True)
class PairedSection:
    """Everything the comparison shows of the paired tests."""

    problems: tuple[PairedProblem, ...]
    only_scored_a: tuple[str, ...]
    only_scored_b: tuple[str, ...]
    neither_scored: tuple[str, ...]
    resolved: McNemar
    steps: StepDifference

    @property
    def first_line(self) -> str:
        """The comparison's first line: both tests, their p, and whether each difference is distinguishable."""
        if not self.problems:
            return "Paired tests: no problem was scored by both runs, so nothing is compared."
        r, s = self.resolved, self.steps
        return (
            f"Paired tests on the {len(self.problems)} problems both runs scored (attempt 1): resolved problems, "
            f"A only {r.only_a} vs B only {r.only_b}, exact McNemar {p_text(r.p_value)}: {noise_verdict(r.p_value)}; "
            f"step pass rate B - A {points(s.difference)} (95% CI {points_range(*_bounds(s))}, "
            f"{STEP_DIFFERENCE_SHORT}), {p_text(s.p_value)}: {noise_verdict(s.p_value, s.interval)}."
        )

    def rows(self) -> list[tuple[str, str]]:
        """(quantity, value) rows of the paired section's table."""
        r, s = self.resolved, self.steps
        return [
            ("problems both runs scored", str(len(self.problems))),
            ("resolved by both / by neither", f"{r.both} / {r.neither}"),
            ("resolved by A only / by B only (discordant)", f"{r.only_a} / {r.only_b}"),
            ("exact McNemar test on resolved problems", f"{p_text(r.p_value)}: {noise_verdict(r.p_value)}"),
            ("steps compared", str(s.steps)),
            ("step pass rate, B - A", points(s.difference)),
            (f"95% interval ({STEP_DIFFERENCE_SHORT})", points_range(*_bounds(s))),
            (
                "standard error (clustered by problem), for the test",
                "n/a" if s.se is None else f"{100.0 * s.se:.1f} pp",
            ),
            ("test of the step difference", f"{p_text(s.p_value)}: {noise_verdict(s.p_value, s.interval)}"),
        ]

    def not_compared(self) -> list[tuple[str, tuple[str, ...]]]:
        """The selected problems left out of the paired tests, by reason (empty reasons omitted)."""
        groups = [
            ("scored by A only", self.only_scored_a),
            ("scored by B only", self.only_scored_b),
            ("scored by neither run", self.neither_scored),
        ]
        return [(label, ids) for label, ids in groups if ids]


def _bounds(difference: StepDifference) -> tuple[float | None, float | None]:
    found = difference.interval
    return (found.low, found.high) if found else (None, None)


def paired_problem(a: ProblemRow, b: ProblemRow, entry_a: SelectionEntry, entry_b: SelectionEntry) -> PairedProblem:
    """One problem both runs scored, on the scored steps both selections list."""
    in_b = set(entry_b.scored_step_ids)
    steps = [step_id for step_id in entry_a.scored_step_ids if step_id in in_b]
    return PairedProblem(
        problem_id=a.problem_id,
        resolved_a=a.resolved,
        resolved_b=b.resolved,
        passed_a=sum(a.status_of(step_id) == "pass" for step_id in steps),
        passed_b=sum(b.status_of(step_id) == "pass" for step_id in steps),
        steps=len(steps),
    )


def paired_section(
    results_a: Sequence[ProblemRow],
    results_b: Sequence[ProblemRow],
    entries_a: Mapping[str, SelectionEntry],
    entries_b: Mapping[str, SelectionEntry],
) -> PairedSection:
    """The paired tests of two runs' results on the same problems (in the same order)."""
    pairs = list(zip(results_a, results_b))
    both = [
        paired_problem(a, b, entries_a[a.problem_id], entries_b[b.problem_id])
        for a, b in pairs
        if is_scored(a) and is_scored(b)
    ]
    return PairedSection(
        problems=tuple(both),
        only_scored_a=tuple(a.problem_id for a, b in pairs if is_scored(a) and not is_scored(b)),
        only_scored_b=tuple(a.problem_id for a, b in pairs if is_scored(b) and not is_scored(a)),
        neither_scored=tuple(a.problem_id for a, b in pairs if not is_scored(a) and not is_scored(b)),
        resolved=mcnemar(both),
        steps=step_difference(both),
    )


def interval_rows(metrics_a: Metrics, metrics_b: Metrics) -> list[tuple[str, str, str, str]]:
    """Each run's 95% intervals of both rates over the compared problems (the metrics table's rows)."""
    found = [headline_intervals(metrics.tallies) for metrics in (metrics_a, metrics_b)]

    def shown(interval: Interval | None) -> str:
        return "n/a" if interval is None else f"{interval.low * 100:.1f}% to {interval.high * 100:.1f}%"

    return [
        (
            f"main_problem_resolve_rate, 95% interval ({RESOLVE_SHORT})",
            shown(found[0].resolve.interval),
            shown(found[1].resolve.interval),
            "see Paired tests",
        ),
        (
            f"subproblem, 95% interval ({CLUSTERED_SHORT})",
            shown(found[0].steps.interval),
            shown(found[1].steps.interval),
            "see Paired tests",
        ),
    ]


PAIRED_NOTE = (
    "Exact McNemar test: of the problems resolved by one run only, how likely a split at least this uneven is "
    "when both runs are equally good (p = 1 without a discordant problem). Step pass rates: the difference "
    "B - A on the steps both runs scored; its 95% interval is Newcombe's hybrid score interval for a paired "
    "difference, built from both runs' clustered Wilson intervals and the correlation of the two rates "
    "clustered by problem (0 where undefined), so it is never a single point; the test is a normal test on "
    "the standard error clustered by problem (steps of one problem are not independent). The rates' own "
    "intervals: Wilson over problems (resolve rate) and clustered Wilson (steps). A difference is called "
    "distinguishable from noise only where p < 0.05 (and, for steps, the interval excludes 0); see docs/results-and-statistics.md, Error bars and paired tests."
)


def paired_lines(section: PairedSection) -> list[str]:
    """The Markdown section of the paired tests."""
    lines = ["## Paired tests (problems both runs scored, attempt 1)", ""]
    lines += ["| quantity | value |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in section.rows()]
    lines.append("")
    left_out = section.not_compared()
    if left_out:
        lines += ["Not compared (listed only):", ""]
        lines += [f"- {label} ({len(ids)}): {', '.join(ids)}" for label, ids in left_out]
        lines.append("")
    return lines + [PAIRED_NOTE, ""]
