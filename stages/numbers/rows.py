"""Problem rows: each selected problem of a run as the summary counts it, its step verdicts laid out in the
order selection.json records (prefilled steps skipped, scored steps without a verdict `no_verdict`, a failing
verdict of a step the model never answered `not_generated`: see `stages.records.status_glossary`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from stages.benchmark.datasets import PREFILLED_REASON
from stages.benchmark.weak_tests import WeakTest, weak_test
from stages.records.endpoint import EndpointRecord
from stages.records.generation import Generation
from stages.records.results import (
    ERROR_STATES,
    GENERATION_FAILED_STATES,
    CellStatus,
    ProblemResult,
    ProblemState,
    RunResults,
    StepLayout,
    ToolStats,
)
from stages.records.usage import Usage
from stages.records.verdict import EnvironmentVerdict, StepVerdict
from stages.statuses import UNGENERATED_STATUSES

SCORED_ATTEMPT = 0  # the attempt whose verdicts the tables, plots and headline count


@dataclass(frozen=True)
class StepRow:
    step_id: str
    status: CellStatus
    reason: str
    tools: ToolStats = ToolStats()  # tool calls of the scored attempt's generation of this step
    cached: bool = False  # the verdict was served from the verdict cache, not executed by this scoring
    environments: tuple[EnvironmentVerdict, ...] = ()  # under `environments=`: each consulted environment's verdict


@dataclass(frozen=True)
class ProblemRow:
    """One selected problem as summarized: its step verdicts and why it failed, if it did."""

    problem_id: str
    split: str
    category: str
    field: str
    subfield: str
    state: ProblemState
    steps: tuple[StepRow, ...]
    scored_expected: int
    usage: Usage | None
    latency_s: float | None
    error: str | None
    resolved: bool
    tools: ToolStats = ToolStats()  # tool calls of every attempt
    skipped_expected: int = 0  # prefilled steps according to the selection
    attempt_usages: tuple[Usage | None, ...] = ()  # the usage of each attempt (None where none is reported)
    attempt_latencies: tuple[float | None, ...] = ()  # the model latency of each attempt, likewise
    endpoints: tuple[tuple[EndpointRecord, int], ...] = ()  # each endpoint that answered, with its steps (attempts)

    def attempt_usage(self, index: int) -> Usage | None:
        return self.attempt_usages[index] if index < len(self.attempt_usages) else None

    def status_of(self, step_id: str) -> CellStatus:
        """The status of a step in the scored attempt; `no_verdict` for a step the row does not hold."""
        return next((step.status for step in self.steps if step.step_id == step_id), "no_verdict")

    @property
    def steps_skipped_expected(self) -> int:
        return self.skipped_expected

    @property
    def scored_rows(self) -> tuple[StepRow, ...]:
        return tuple(step for step in self.steps if step.status != "skipped")

    @property
    def steps_scored(self) -> int:
        """The denominator of this problem: its scored steps according to the selection (the data)."""
        return self.scored_expected

    @property
    def steps_passed(self) -> int:
        return min(sum(step.status == "pass" for step in self.scored_rows), self.scored_expected)

    @property
    def steps_skipped(self) -> int:
        return sum(step.status == "skipped" for step in self.steps)

    @property
    def is_error(self) -> bool:
        """Error in the Total/Evaluated/Error sense: generation reported an error, or there is nothing scored."""
        return self.state in ERROR_STATES

    @property
    def failed(self) -> bool:
        """Generation or scoring failed for this problem (it is listed in `failed_problems`)."""
        return self.is_error or self.error is not None

    @property
    def first_failure(self) -> StepRow | None:
        return next((step for step in self.scored_rows if step.status != "pass"), None)


# ---------------------------------------------------------------------------
# Building the rows
# ---------------------------------------------------------------------------


def _attempts_cost(result: ProblemResult) -> tuple[Usage | None, float | None]:
    """Tokens, calls and latency summed over every attempt that reports them (all attempts were billed)."""
    costs = result.costs()
    usages = [cost.usage for cost in costs if cost.usage is not None]
    latencies = [cost.latency_s for cost in costs if cost.latency_s is not None]
    return (sum(usages, Usage()) if usages else None), (sum(latencies) if latencies else None)


def _rows_without_details(layout: StepLayout, reason: str) -> tuple[StepRow, ...]:
    skipped = PREFILLED_REASON
    return tuple(
        StepRow(step.step_id, "skipped", skipped) if step.prefilled else StepRow(step.step_id, "no_verdict", reason)
        for step in layout
    )


def ungenerated_steps(result: ProblemResult, attempt: int = SCORED_ATTEMPT) -> frozenset[str]:
    """The steps of the scored attempt that the model never answered: those whose generation status says so (the
    request failed, e.g. the server down; the prompt over the context; a later step never asked)."""
    generation: Generation | None = result.generation(attempt)
    if generation is None:
        return frozenset()
    return frozenset(step.step_id for step in generation.steps if step.status in UNGENERATED_STATUSES)


def cell_status(verdict: StepVerdict, ungenerated: frozenset[str]) -> CellStatus:
    """A verdict's status, `not_generated` for a failing one of a step the model never answered."""
    return "not_generated" if verdict.status == "fail" and verdict.step_id in ungenerated else verdict.status


def _merge_steps(
    layout: StepLayout, verdicts: Sequence[StepVerdict], ungenerated: frozenset[str] = frozenset()
) -> tuple[StepRow, ...]:
    """Verdicts of the details file in data order; steps it lacks become `no_verdict`, extra ones are kept last."""
    by_id = {verdict.step_id: verdict for verdict in verdicts}
    rows = []
    for step in layout:
        verdict = by_id.pop(step.step_id, None)
        if verdict is not None:
            status = cell_status(verdict, ungenerated)
            rows.append(
                StepRow(step.step_id, status, verdict.reason, cached=verdict.cached, environments=verdict.environments)
            )
        elif step.prefilled:
            rows.append(StepRow(step.step_id, "skipped", PREFILLED_REASON))
        else:
            rows.append(StepRow(step.step_id, "no_verdict", "step missing from the details file"))
    rows.extend(StepRow(sid, verdict.status, verdict.reason) for sid, verdict in by_id.items())
    return tuple(rows)


def _with_tools(rows: Sequence[StepRow], result: ProblemResult) -> tuple[StepRow, ...]:
    generation = result.generation(SCORED_ATTEMPT)
    if generation is None:
        return tuple(rows)
    stats = {step.step_id: step.tool_stats for step in generation.steps}
    return tuple(dataclasses.replace(row, tools=stats.get(row.step_id, ToolStats())) for row in rows)


def _scoring_error(rows: Sequence[StepRow], scored_expected: int, evaluation_error: str | None) -> str | None:
    """Why scoring failed for a problem whose generation succeeded; None when it did not."""
    if evaluation_error:
        return evaluation_error
    scored = [row for row in rows if row.status != "skipped"]
    if len(scored) != scored_expected:
        return f"details hold {len(scored)} scored steps, the selection expects {scored_expected}"
    broken = next((row for row in scored if row.status in ("eval_error", "no_verdict")), None)
    if broken is not None:
        return f"step {broken.step_id}: {broken.status}" + (f" ({broken.reason})" if broken.reason else "")
    return None


def problem_row(result: ProblemResult) -> ProblemRow:
    """The summarized record of one selected problem (selection entry, with its step layout, + its details)."""
    attempt = result.scored_attempt(SCORED_ATTEMPT)
    if attempt is None:
        steps = _with_tools(_rows_without_details(result.entry.layout, result.missing_reason or ""), result)
        return _row(result, steps, result.generation_failure or result.details_error, resolved=False)
    steps = _with_tools(_merge_steps(result.entry.layout, attempt.verdicts, ungenerated_steps(result)), result)
    error: str | None
    if result.state in GENERATION_FAILED_STATES:
        error = result.generation_failure or attempt.evaluation_error or result.state.replace("_", " ")
    else:  # a later attempt whose generation failed names the problem too (its record says which attempt)
        error = result.generation_failure or _scoring_error(steps, result.entry.scored_steps, attempt.evaluation_error)
    return _row(result, steps, error, resolved=result.resolved(SCORED_ATTEMPT))


def _row(result: ProblemResult, steps: tuple[StepRow, ...], error: str | None, *, resolved: bool) -> ProblemRow:
    entry = result.entry
    usage, latency = _attempts_cost(result)
    costs = result.costs()
    return ProblemRow(
        problem_id=entry.problem_id,
        split=entry.split,
        category=entry.category,
        field=entry.taxonomy.field,
        subfield=entry.taxonomy.subfield,
        state=result.state,
        steps=steps,
        scored_expected=entry.scored_steps,
        usage=usage,
        latency_s=latency,
        error=error,
        resolved=resolved,
        tools=result.tool_stats,
        skipped_expected=entry.skipped_steps,
        attempt_usages=tuple(cost.usage for cost in costs),
        attempt_latencies=tuple(cost.latency_s for cost in costs),
        endpoints=tuple(
            pair for generation in result.generations if generation for pair in generation.endpoint_steps()
        ),
    )


def collect_rows(run: RunResults) -> tuple[ProblemRow, ...]:
    return tuple(problem_row(result) for result in run.problems)


def weak_passes(rows: Sequence[ProblemRow]) -> list[tuple[str, WeakTest]]:
    """The passed steps (of the scored attempt) whose official tests are known to be weak (`stages.benchmark.weak_tests`):
    flagged beside their verdict, which stays a pass."""
    return [
        (step.step_id, weak)
        for row in rows
        for step in row.scored_rows
        if step.status == "pass" and (weak := weak_test(step.step_id)) is not None
    ]
