"""Aggregation of problem rows: the headline counts and rates with their 95% intervals (stages.numbers.uncertainty),
groups by category, field, subfield and split (intervals from MIN_GROUP_PROBLEMS problems on), the inspect_ai step
view, step statuses, token usage, cost, latency, tool calls and the attempts metrics."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from stages.benchmark.categories import fields
from stages.config.settings import Settings
from stages.numbers.pricing import Prices, cost_of, total_cost
from stages.numbers.rows import ProblemRow
from stages.numbers.uncertainty.intervals import MIN_GROUP_PROBLEMS, HeadlineIntervals, ProblemTally, group_intervals
from stages.records.results import CELL_STATUSES, NO_DETAILS_STATES, RunResults, ToolStats
from stages.records.summary import AttemptMetrics, GroupRecord, InspectAiView, RunCost, UsageTotals
from stages.records.usage import Usage
from stages.storage.json_values import freeze_object


@dataclass(frozen=True)
class Metrics:
    """Counts of a group of problems, and the two rates, under the names of the results contract."""

    total: int
    errors: int
    resolved: int
    steps_passed: int
    steps_scored: int
    steps_skipped: int
    tallies: tuple[ProblemTally, ...] = ()  # each problem's outcome, for the intervals
    no_details: int = 0  # problems without a valid details file (a part of `errors`)

    @property
    def evaluated(self) -> int:
        return self.total  # every selected problem is evaluated: failures count as unresolved, never dropped

    @property
    def resolve_rate(self) -> float | None:
        return self.resolved / self.evaluated if self.evaluated else None

    @property
    def step_rate(self) -> float | None:
        return self.steps_passed / self.steps_scored if self.steps_scored else None

    def intervals(self, min_problems: int = MIN_GROUP_PROBLEMS) -> HeadlineIntervals | None:
        """Both rates with their 95% intervals; None for a group of fewer than `min_problems` problems."""
        return group_intervals(self.tallies, min_problems)

    def recorded(self, min_problems: int = MIN_GROUP_PROBLEMS, *, field: str | None = None) -> GroupRecord:
        """The counts and rates as summary.json records them, with `intervals` (None below `min_problems`) and,
        for a subfield, its `field`."""
        intervals = self.intervals(min_problems)
        return GroupRecord(
            field=field,
            resolve_rate=self.resolve_rate,
            step_rate=self.step_rate,
            total=self.total,
            evaluated=self.evaluated,
            errors=self.errors,
            resolved=self.resolved,
            problems=self.evaluated,
            steps_passed=self.steps_passed,
            steps_scored=self.steps_scored,
            steps_skipped=self.steps_skipped,
            intervals=intervals.recorded() if intervals else None,
        )


def metrics_of(rows: Iterable[ProblemRow]) -> Metrics:
    rows = tuple(rows)
    return Metrics(
        total=len(rows),
        errors=sum(row.is_error for row in rows),
        resolved=sum(row.resolved for row in rows),
        steps_passed=sum(row.steps_passed for row in rows),
        steps_scored=sum(row.steps_scored for row in rows),
        steps_skipped=sum(row.steps_skipped for row in rows),
        tallies=tuple(ProblemTally(row.resolved, row.steps_passed, row.steps_scored) for row in rows),
        no_details=sum(row.state in NO_DETAILS_STATES for row in rows),
    )


def grouped_metrics(rows: Sequence[ProblemRow], key: str) -> dict[str, Metrics]:
    """Metrics per value of `key` (category or split), groups in order of first appearance."""
    groups: dict[str, list[ProblemRow]] = {}
    for row in rows:
        groups.setdefault(getattr(row, key), []).append(row)
    return {name: metrics_of(members) for name, members in groups.items()}


def _by_field_order(rows: Sequence[ProblemRow]) -> list[ProblemRow]:
    """Rows ordered by field as SciCode's table lists the fields (others after them, in order of appearance);
    stable, so problems keep their order within a field."""
    known = fields()
    seen = list(dict.fromkeys(row.field for row in rows))
    rank = {name: (known.index(name) if name in known else len(known) + seen.index(name)) for name in seen}
    return sorted(rows, key=lambda row: rank[row.field])


def field_metrics(rows: Sequence[ProblemRow]) -> dict[str, Metrics]:
    """Metrics per field, in the order of SciCode's field table."""
    return grouped_metrics(_by_field_order(rows), "field")


def subfield_metrics(rows: Sequence[ProblemRow]) -> dict[str, tuple[str, Metrics]]:
    """subfield -> (its field, metrics): fields in table order, subfields in order of first appearance."""
    ordered = _by_field_order(rows)
    field_of = {row.subfield: row.field for row in ordered}
    return {name: (field_of[name], metrics) for name, metrics in grouped_metrics(ordered, "subfield").items()}


@dataclass(frozen=True)
class InspectView:
    """The step view of the official inspect_ai task: every step of a problem is in its denominator,
    prefilled ones included and never passed, so a problem with a prefilled step is never resolved."""

    steps_passed: int
    steps_total: int
    resolved: int
    problems: int

    def recorded(self) -> InspectAiView:
        return InspectAiView(
            steps_passed=self.steps_passed,
            steps_total=self.steps_total,
            step_rate=self.steps_passed / self.steps_total if self.steps_total else None,
            resolved=self.resolved,
            problems=self.problems,
            resolve_rate=self.resolved / self.problems if self.problems else None,
            note=INSPECT_VIEW_NOTE,
        )


INSPECT_VIEW_NOTE = (
    "step view of the official inspect_ai task: prefilled steps are in the step denominator and "
    "count as not passed, so problems with a prefilled step (13, 62, 76) are never resolved; "
    "the headline excludes prefilled steps"
)


def inspect_view(rows: Sequence[ProblemRow]) -> InspectView:
    return InspectView(
        steps_passed=sum(row.steps_passed for row in rows),
        steps_total=sum(row.steps_scored + row.steps_skipped_expected for row in rows),
        resolved=sum(row.resolved and row.steps_skipped_expected == 0 for row in rows),
        problems=len(rows),
    )


def tool_totals(rows: Sequence[ProblemRow]) -> ToolStats:
    """Tool calls of the scored attempt over every step."""
    return sum((step.tools for row in rows for step in row.steps), ToolStats())


def behaved_as_naive(rows: Sequence[ProblemRow], mode: str) -> bool:
    """A tool_use run whose model made no tool call at all in any attempt (a server that ignores `tools` does this)."""
    every = sum((row.tools for row in rows), ToolStats())
    return mode == "tool_use" and every.calls == 0 and total_usage(rows).calls > 0


def status_counts(rows: Iterable[ProblemRow]) -> dict[str, int]:
    counts = Counter(step.status for row in rows for step in row.steps)
    return {status: counts.get(status, 0) for status in CELL_STATUSES}


def total_usage(rows: Sequence[ProblemRow]) -> UsageTotals:
    reporting = [row.usage for row in rows if row.usage is not None]
    return replace(UsageTotals.of(sum(reporting, Usage())), problems_reporting=len(reporting))


def run_cost(rows: Sequence[ProblemRow], prices: Prices | None) -> RunCost:
    """The run's cost: in total, per attempt index (summed over problems) and the attempts it covers; every
    figure None without prices (tokens only)."""
    attempts = max((len(row.attempt_usages) for row in rows), default=1)
    per_attempt = tuple(
        total_cost(cost_of(row.attempt_usage(index), prices) for row in rows) for index in range(attempts)
    )
    attempt_usages = [usage for row in rows for usage in row.attempt_usages]
    return RunCost(
        prices=prices,
        total=total_cost(cost_of(usage, prices) for usage in attempt_usages),
        per_attempt=per_attempt,
        attempts_priced=sum(usage is not None for usage in attempt_usages) if prices else 0,
        attempts_total=len(attempt_usages),
    )


@dataclass(frozen=True)
class ReportedCost:
    """Tokens and model latency summed over the attempts that report both, with how many attempts do."""

    usage: Usage
    latency_s: float
    attempts_reporting: int
    attempts_total: int


def row_cost(row: ProblemRow) -> ReportedCost:
    """The cost of one problem over its attempts that report both usage and latency (details meta first, else
    the generation file's steps)."""
    reporting = [
        (usage, latency)
        for usage, latency in zip(row.attempt_usages, row.attempt_latencies)
        if usage is not None and latency is not None
    ]
    return ReportedCost(
        usage=sum((usage for usage, _ in reporting), Usage()),
        latency_s=math.fsum(latency for _, latency in reporting),
        attempts_reporting=len(reporting),
        attempts_total=len(row.attempt_usages),
    )


def reported_cost(rows: Iterable[ProblemRow]) -> ReportedCost:
    """`row_cost` summed over problems."""
    costs = [row_cost(row) for row in rows]
    return ReportedCost(
        usage=sum((cost.usage for cost in costs), Usage()),
        latency_s=math.fsum(cost.latency_s for cost in costs),
        attempts_reporting=sum(cost.attempts_reporting for cost in costs),
        attempts_total=sum(cost.attempts_total for cost in costs),
    )


def total_latency(rows: Sequence[ProblemRow]) -> float:
    return round(sum(row.latency_s for row in rows if row.latency_s is not None), 3)


def attempt_metrics_of(settings: Settings, run: RunResults) -> AttemptMetrics | None:
    """With attempts > 1: per-attempt rates, pass@k and both attempt strategies (stages.numbers.passk); else None.

    A problem without a valid details file counts as unresolved in every attempt. When the details files
    disagree on the number of attempts, the reason is recorded under `error` instead of numbers.
    """
    if settings.attempts <= 1:
        return None
    from stages.numbers.passk import PassKError, metrics_from_outcomes, result_outcomes

    try:
        outcomes = [result_outcomes(result, settings.attempts) for result in run.problems]
        metrics = metrics_from_outcomes(outcomes)  # pass@k's JSON form, shared with compare.json
    except PassKError as error:
        return AttemptMetrics(strategy=settings.attempt_strategy, error=str(error))
    return AttemptMetrics.from_record(freeze_object({"strategy": settings.attempt_strategy, **metrics}))
