"""compare.json: the record of a comparison of two runs, beside compare.md and compare.html.

`ComparisonRecord` is deeply immutable (frozen dataclasses and tuples) and is the only code that knows the
record's keys: `ComparisonRecord.of` builds it from a `stages.compare.comparison.Comparison`, `to_record` gives the JSON
mapping that `schemas/compare.schema.json` validates (on write and on read), `from_record` reads one back.
Counts are those of the compared problems, attempt 1 (as compare.md); deltas are left to the reader (B - A).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from stages.benchmark.datasets import DEFAULT_DATASET
from stages.compare.comparison import AttemptMetrics, ComparedRun, Comparison, StepFlip
from stages.compare.paired import PairedSection
from stages.records.declared import Declared, key, one_of
from stages.records.results import CELL_STATUSES, CellStatus
from stages.storage.artifacts import read_typed
from stages.storage.json_values import (
    Frozen,
    FrozenObject,
    JSONValue,
    integer,
    number,
    obj,
    objects,
    text,
)
from stages.summarize.uncertainty.paired import STEP_DIFFERENCE_DESCRIPTION, STEP_DIFFERENCE_METHOD

# What `paired.steps` low and high were in comparisons written before the method was recorded.
EARLIER_STEP_METHOD = "wald_clustered"
EARLIER_STEP_DESCRIPTION = "D +- 1.96 SE, the SE clustered by problem (written before the method was recorded)"

COMPARE_KIND = "compare"  # schemas/compare.schema.json


def _optional_float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _optional_int(value: Frozen) -> int | None:
    return None if value is None else integer(value)


@dataclass(frozen=True)
class RunCounts(Declared):
    """The summary's counts of one run over the compared problems."""

    problems: int = field(metadata=key("main_problem_total"))
    resolved: int = field(metadata=key("main_problem_resolved"))
    steps_passed: int = field(metadata=key("subproblem_correct"))
    steps_scored: int = field(metadata=key("subproblem_total"))
    errors: int = field(metadata=key("Error"))
    no_details: int


@dataclass(frozen=True)
class RunCost(Declared):
    """Tokens, calls and model latency over the attempts that report both usage and latency."""

    input_tokens: int
    output_tokens: int
    total_tokens: int
    calls: int
    latency_s: float
    attempts_reporting: int
    attempts_total: int


def _pass_at_k(value: Frozen) -> tuple[tuple[int, float], ...]:
    """`pass_at_k`: an object of k (as text) to the estimate, read in order of k."""
    return tuple(sorted((int(k), number(estimate)) for k, estimate in obj(value).items()))


def _pass_at_k_record(pass_at_k: tuple[tuple[int, float], ...]) -> JSONValue:
    return {str(k): estimate for k, estimate in pass_at_k}


@dataclass(frozen=True)
class RunAttempts(Declared):
    """A run's attempt metrics (stages.summarize.passk) when a compared run holds several attempts, or why they are not
    available (`error`, every number then None)."""

    attempts: int | None = field(metadata=key(read=_optional_int))
    mean_resolve_rate: float | None = field(metadata=key("mean_main_problem_resolve_rate"))
    mean_step_rate: float | None = field(metadata=key("mean_subproblem_rate"))
    pass_at_k: tuple[tuple[int, float], ...] = field(metadata=key(read=_pass_at_k, write=_pass_at_k_record))
    resolved_any: int | None = field(metadata=key("resolved_by_any_attempt", read=_optional_int))
    steps_passed_any: int | None = field(metadata=key("steps_passed_by_any_attempt", read=_optional_int))
    error: str | None = None

    @classmethod
    def of(cls, metrics: AttemptMetrics) -> RunAttempts:
        if isinstance(metrics, str):
            return cls(None, None, None, (), None, None, metrics)
        any_attempt = metrics["any_attempt"]
        return cls(
            attempts=int(metrics["attempts"]),
            mean_resolve_rate=_optional_float(metrics["mean_main_problem_resolve_rate"]),
            mean_step_rate=_optional_float(metrics["mean_subproblem_rate"]),
            pass_at_k=tuple(sorted((int(k), float(value)) for k, value in metrics["pass_at_k"].items())),
            resolved_any=int(any_attempt["main_problem_resolved"]),
            steps_passed_any=int(any_attempt["subproblem_correct"]),
        )


def _status_counts(value: Frozen) -> tuple[tuple[CellStatus, int], ...]:
    """`status_counts` in CELL_STATUSES order; a comparison written before `not_generated` was counted has no
    such key."""
    counts = obj(value)
    return tuple((status, integer(counts[status])) for status in CELL_STATUSES if status in counts)


def _status_counts_record(statuses: tuple[tuple[CellStatus, int], ...]) -> JSONValue:
    return dict(statuses)


@dataclass(frozen=True, kw_only=True)
class ComparedRunRecord(Declared):
    """One side of the comparison: which run, and its counts, statuses, cost and attempt metrics."""

    run_dir: str
    model: str
    run: str
    dataset: str = field(default=DEFAULT_DATASET, metadata=key(omit="if_default"))
    split: str
    mode: str
    with_background: str
    problems_selected: int
    counts: RunCounts
    # every cell status in CELL_STATUSES order
    statuses: tuple[tuple[CellStatus, int], ...] = field(
        metadata=key("status_counts", read=_status_counts, write=_status_counts_record)
    )
    cost: RunCost
    attempts: RunAttempts | None  # None when both runs hold one attempt per problem

    @classmethod
    def of(cls, side: ComparedRun, attempts: AttemptMetrics | None) -> ComparedRunRecord:
        info, metrics, cost = side.info, side.metrics, side.cost
        return cls(
            run_dir=str(info.run_dir),
            model=info.model,
            run=info.run,
            split=info.split,
            mode=info.mode,
            with_background=info.with_background,
            problems_selected=len(info.selection),
            counts=RunCounts(
                metrics.total,
                metrics.resolved,
                metrics.steps_passed,
                metrics.steps_scored,
                metrics.errors,
                metrics.no_details,
            ),
            statuses=tuple((status, int(side.statuses.get(status, 0))) for status in CELL_STATUSES),
            cost=RunCost(
                cost.usage.input_tokens,
                cost.usage.output_tokens,
                cost.usage.total_tokens,
                cost.usage.calls,
                cost.latency_s,
                cost.attempts_reporting,
                cost.attempts_total,
            ),
            attempts=None if attempts is None else RunAttempts.of(attempts),
            dataset=info.dataset,
        )


@dataclass(frozen=True)
class PairedRecord(Declared):
    """The paired tests on the problems both runs scored (stages.compare.paired)."""

    problems: tuple[str, ...]
    only_scored_a: tuple[str, ...]
    only_scored_b: tuple[str, ...]
    neither_scored: tuple[str, ...]
    resolved_both: int = field(metadata=key("both", within="resolved"))
    resolved_neither: int = field(metadata=key("neither", within="resolved"))
    resolved_only_a: int = field(metadata=key("only_a", within="resolved"))
    resolved_only_b: int = field(metadata=key("only_b", within="resolved"))
    mcnemar_p: float = field(metadata=key(within="resolved"))
    steps: int = field(metadata=key("compared", within="steps"))
    step_difference: float | None = field(metadata=key("difference", within="steps"))
    step_se: float | None = field(metadata=key("se", within="steps"))
    step_low: float | None = field(metadata=key("low", within="steps"))
    step_high: float | None = field(metadata=key("high", within="steps"))
    step_p: float | None = field(metadata=key("p_value", within="steps"))
    step_method: str = field(
        default=STEP_DIFFERENCE_METHOD, metadata=key("method", within="steps", absent=EARLIER_STEP_METHOD)
    )
    step_description: str = field(
        default=STEP_DIFFERENCE_DESCRIPTION,
        metadata=key("description", within="steps", absent=EARLIER_STEP_DESCRIPTION),
    )
    step_correlation: float | None = field(default=None, metadata=key("correlation", within="steps"))

    @classmethod
    def of(cls, section: PairedSection) -> PairedRecord:
        r, s = section.resolved, section.steps
        return cls(
            problems=tuple(problem.problem_id for problem in section.problems),
            only_scored_a=section.only_scored_a,
            only_scored_b=section.only_scored_b,
            neither_scored=section.neither_scored,
            resolved_both=r.both,
            resolved_neither=r.neither,
            resolved_only_a=r.only_a,
            resolved_only_b=r.only_b,
            mcnemar_p=r.p_value,
            steps=s.steps,
            step_difference=s.difference,
            step_se=s.se,
            step_low=s.interval.low if s.interval else None,
            step_high=s.interval.high if s.interval else None,
            step_p=s.p_value,
            step_correlation=s.correlation,
        )


@dataclass(frozen=True)
class SettingDifference(Declared):
    """A recorded setting, library version or confinement line that differs, as compare.md shows it."""

    name: str
    a: str
    b: str


_cell_status = one_of(CELL_STATUSES, "no_verdict")  # the schema allows only these; anything else: no verdict


def _flip_of(record: FrozenObject) -> StepFlip:
    return StepFlip(
        text(record.get("problem_id")),
        text(record.get("step_id")),
        _cell_status(record.get("status_a")),
        _cell_status(record.get("status_b")),
    )


def _flips(value: Frozen) -> tuple[StepFlip, ...]:
    """A step flip is the comparison's own value (`stages.compare.comparison`), written as its four fields."""
    return tuple(_flip_of(flip) for flip in objects(value))


def _flip_records(flips: tuple[StepFlip, ...]) -> JSONValue:
    return [
        {"problem_id": flip.problem_id, "step_id": flip.step_id, "status_a": flip.status_a, "status_b": flip.status_b}
        for flip in flips
    ]


@dataclass(frozen=True)
class ComparisonRecord(Declared):
    """compare.json: both runs, the compared problems, what differs, the paired tests and the flips."""

    run_a: ComparedRunRecord = field(metadata=key("A", within="runs"))
    run_b: ComparedRunRecord = field(metadata=key("B", within="runs"))
    compared_problems: tuple[str, ...]
    narrowed_to: str | None  # the command line's sample_ids/category that narrowed the comparison
    only_in_a: tuple[str, ...]
    only_in_b: tuple[str, ...]
    statement_differs: tuple[str, ...]
    differences: tuple[SettingDifference, ...] = field(metadata=key("setting_differences"))
    paired: PairedRecord
    problems_lost: tuple[str, ...]  # resolved in A, unresolved in B
    problems_gained: tuple[str, ...]
    steps_lost: tuple[StepFlip, ...] = field(metadata=key(read=_flips, write=_flip_records))  # pass in A, not in B
    steps_gained: tuple[StepFlip, ...] = field(metadata=key(read=_flips, write=_flip_records))

    @classmethod
    def of(cls, comparison: Comparison) -> ComparisonRecord:
        c = comparison
        entries_a, entries_b = c.run_a.entries, c.run_b.entries
        return cls(
            run_a=ComparedRunRecord.of(c.side_a, c.attempts_a),
            run_b=ComparedRunRecord.of(c.side_b, c.attempts_b),
            compared_problems=c.common,
            narrowed_to=c.narrowed,
            only_in_a=tuple(pid for pid in entries_a if pid not in entries_b),
            only_in_b=tuple(pid for pid in entries_b if pid not in entries_a),
            statement_differs=tuple(
                pid for pid in c.common if entries_a[pid].fingerprint != entries_b[pid].fingerprint
            ),
            differences=tuple(SettingDifference(str(name), str(a), str(b)) for name, a, b in c.differences),
            paired=PairedRecord.of(c.paired),
            problems_lost=tuple(str(row[0]) for row in c.problems_lost),
            problems_gained=tuple(str(row[0]) for row in c.problems_gained),
            steps_lost=tuple(c.steps_lost),
            steps_gained=tuple(c.steps_gained),
        )


def read_comparison_record(path: Path) -> ComparisonRecord | None:
    """The compare.json at `path` when it exists and validates (parsed once per file version); None otherwise."""
    return read_typed(path, COMPARE_KIND, ComparisonRecord.from_record)
