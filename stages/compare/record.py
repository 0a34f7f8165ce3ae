"""compare.json: the record of a comparison of two runs, beside compare.md and compare.html.

`ComparisonRecord` is deeply immutable (frozen dataclasses and tuples) and is the only code that knows the
record's keys: `ComparisonRecord.of` builds it from a `stages.compare.comparison.Comparison`, `to_record` gives the JSON
mapping that `schemas/compare.schema.json` validates (on write and on read), `from_record` reads one back.
Counts are those of the compared problems, attempt 1 (as compare.md); deltas are left to the reader (B - A).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stages.benchmark.datasets import DEFAULT_DATASET
from stages.compare.comparison import AttemptMetrics, ComparedRun, Comparison, StepFlip
from stages.compare.paired import PairedSection
from stages.numbers.uncertainty.paired import STEP_DIFFERENCE_DESCRIPTION, STEP_DIFFERENCE_METHOD
from stages.records.results import CELL_STATUSES, CellStatus
from stages.storage.artifacts import read_typed
from stages.storage.json_values import (
    Frozen,
    FrozenObject,
    JSONObject,
    JSONValue,
    integer,
    number,
    obj,
    objects,
    optional_number,
    optional_text,
    text,
    texts,
)

# What `paired.steps` low and high were in comparisons written before the method was recorded.
EARLIER_STEP_METHOD = "wald_clustered"
EARLIER_STEP_DESCRIPTION = "D +- 1.96 SE, the SE clustered by problem (written before the method was recorded)"

COMPARE_KIND = "compare"  # schemas/compare.schema.json


def _optional_float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _optional_int(value: Frozen) -> int | None:
    return None if value is None else integer(value)


def _id_list(values: tuple[str, ...]) -> list[JSONValue]:
    return list(values)


@dataclass(frozen=True)
class RunCounts:
    """The summary's counts of one run over the compared problems."""

    problems: int
    resolved: int
    steps_passed: int
    steps_scored: int
    errors: int
    no_details: int

    def to_record(self) -> JSONObject:
        return {
            "main_problem_total": self.problems,
            "main_problem_resolved": self.resolved,
            "subproblem_correct": self.steps_passed,
            "subproblem_total": self.steps_scored,
            "Error": self.errors,
            "no_details": self.no_details,
        }

    @classmethod
    def from_record(cls, record: FrozenObject) -> RunCounts:
        return cls(
            problems=integer(record.get("main_problem_total")),
            resolved=integer(record.get("main_problem_resolved")),
            steps_passed=integer(record.get("subproblem_correct")),
            steps_scored=integer(record.get("subproblem_total")),
            errors=integer(record.get("Error")),
            no_details=integer(record.get("no_details")),
        )


@dataclass(frozen=True)
class RunCost:
    """Tokens, calls and model latency over the attempts that report both usage and latency."""

    input_tokens: int
    output_tokens: int
    total_tokens: int
    calls: int
    latency_s: float
    attempts_reporting: int
    attempts_total: int

    def to_record(self) -> JSONObject:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "calls": self.calls,
            "latency_s": self.latency_s,
            "attempts_reporting": self.attempts_reporting,
            "attempts_total": self.attempts_total,
        }

    @classmethod
    def from_record(cls, record: FrozenObject) -> RunCost:
        return cls(
            input_tokens=integer(record.get("input_tokens")),
            output_tokens=integer(record.get("output_tokens")),
            total_tokens=integer(record.get("total_tokens")),
            calls=integer(record.get("calls")),
            latency_s=number(record.get("latency_s")),
            attempts_reporting=integer(record.get("attempts_reporting")),
            attempts_total=integer(record.get("attempts_total")),
        )


@dataclass(frozen=True)
class RunAttempts:
    """A run's attempt metrics (stages.numbers.passk) when a compared run holds several attempts, or why they are not
    available (`error`, every number then None)."""

    attempts: int | None
    mean_resolve_rate: float | None
    mean_step_rate: float | None
    pass_at_k: tuple[tuple[int, float], ...]
    resolved_any: int | None
    steps_passed_any: int | None
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

    def to_record(self) -> JSONObject:
        return {
            "attempts": self.attempts,
            "mean_main_problem_resolve_rate": self.mean_resolve_rate,
            "mean_subproblem_rate": self.mean_step_rate,
            "pass_at_k": {str(k): value for k, value in self.pass_at_k},
            "resolved_by_any_attempt": self.resolved_any,
            "steps_passed_by_any_attempt": self.steps_passed_any,
            "error": self.error,
        }

    @classmethod
    def from_record(cls, record: FrozenObject) -> RunAttempts:
        pass_at_k = obj(record.get("pass_at_k"))
        return cls(
            attempts=_optional_int(record.get("attempts")),
            mean_resolve_rate=optional_number(record.get("mean_main_problem_resolve_rate")),
            mean_step_rate=optional_number(record.get("mean_subproblem_rate")),
            pass_at_k=tuple(sorted((int(k), number(value)) for k, value in pass_at_k.items())),
            resolved_any=_optional_int(record.get("resolved_by_any_attempt")),
            steps_passed_any=_optional_int(record.get("steps_passed_by_any_attempt")),
            error=optional_text(record.get("error")),
        )


@dataclass(frozen=True)
class ComparedRunRecord:
    """One side of the comparison: which run, and its counts, statuses, cost and attempt metrics."""

    run_dir: str
    model: str
    run: str
    split: str
    mode: str
    with_background: str
    problems_selected: int
    counts: RunCounts
    statuses: tuple[tuple[CellStatus, int], ...]  # every cell status in CELL_STATUSES order
    cost: RunCost
    attempts: RunAttempts | None  # None when both runs hold one attempt per problem
    dataset: str = DEFAULT_DATASET

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

    def to_record(self) -> JSONObject:
        return {
            "run_dir": self.run_dir,
            "model": self.model,
            "run": self.run,
            **({} if self.dataset == DEFAULT_DATASET else {"dataset": self.dataset}),
            "split": self.split,
            "mode": self.mode,
            "with_background": self.with_background,
            "problems_selected": self.problems_selected,
            "counts": self.counts.to_record(),
            "status_counts": dict(self.statuses),
            "cost": self.cost.to_record(),
            "attempts": None if self.attempts is None else self.attempts.to_record(),
        }

    @classmethod
    def from_record(cls, record: FrozenObject) -> ComparedRunRecord:
        counts = obj(record.get("status_counts"))
        attempts = record.get("attempts")
        return cls(
            run_dir=text(record.get("run_dir")),
            model=text(record.get("model")),
            run=text(record.get("run")),
            dataset=text(record.get("dataset"), DEFAULT_DATASET),
            split=text(record.get("split")),
            mode=text(record.get("mode")),
            with_background=text(record.get("with_background")),
            problems_selected=integer(record.get("problems_selected")),
            counts=RunCounts.from_record(obj(record.get("counts"))),
            # a comparison written before `not_generated` was counted has no such key
            statuses=tuple((status, integer(counts[status])) for status in CELL_STATUSES if status in counts),
            cost=RunCost.from_record(obj(record.get("cost"))),
            attempts=None if attempts is None else RunAttempts.from_record(obj(attempts)),
        )


@dataclass(frozen=True)
class PairedRecord:
    """The paired tests on the problems both runs scored (stages.compare.paired)."""

    problems: tuple[str, ...]
    only_scored_a: tuple[str, ...]
    only_scored_b: tuple[str, ...]
    neither_scored: tuple[str, ...]
    resolved_both: int
    resolved_neither: int
    resolved_only_a: int
    resolved_only_b: int
    mcnemar_p: float
    steps: int
    step_difference: float | None
    step_se: float | None
    step_low: float | None
    step_high: float | None
    step_p: float | None
    step_method: str = STEP_DIFFERENCE_METHOD
    step_description: str = STEP_DIFFERENCE_DESCRIPTION
    step_correlation: float | None = None

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

    def to_record(self) -> JSONObject:
        return {
            "problems": _id_list(self.problems),
            "only_scored_a": _id_list(self.only_scored_a),
            "only_scored_b": _id_list(self.only_scored_b),
            "neither_scored": _id_list(self.neither_scored),
            "resolved": {
                "both": self.resolved_both,
                "neither": self.resolved_neither,
                "only_a": self.resolved_only_a,
                "only_b": self.resolved_only_b,
                "mcnemar_p": self.mcnemar_p,
            },
            "steps": {
                "compared": self.steps,
                "difference": self.step_difference,
                "se": self.step_se,
                "low": self.step_low,
                "high": self.step_high,
                "p_value": self.step_p,
                "method": self.step_method,
                "description": self.step_description,
                "correlation": self.step_correlation,
            },
        }

    @classmethod
    def from_record(cls, record: FrozenObject) -> PairedRecord:
        resolved, steps = obj(record.get("resolved")), obj(record.get("steps"))
        return cls(
            problems=texts(record.get("problems")),
            only_scored_a=texts(record.get("only_scored_a")),
            only_scored_b=texts(record.get("only_scored_b")),
            neither_scored=texts(record.get("neither_scored")),
            resolved_both=integer(resolved.get("both")),
            resolved_neither=integer(resolved.get("neither")),
            resolved_only_a=integer(resolved.get("only_a")),
            resolved_only_b=integer(resolved.get("only_b")),
            mcnemar_p=number(resolved.get("mcnemar_p")),
            steps=integer(steps.get("compared")),
            step_difference=optional_number(steps.get("difference")),
            step_se=optional_number(steps.get("se")),
            step_low=optional_number(steps.get("low")),
            step_high=optional_number(steps.get("high")),
            step_p=optional_number(steps.get("p_value")),
            step_method=text(steps.get("method"), EARLIER_STEP_METHOD),
            step_description=text(steps.get("description"), EARLIER_STEP_DESCRIPTION),
            step_correlation=optional_number(steps.get("correlation")),
        )


@dataclass(frozen=True)
class SettingDifference:
    """A recorded setting, library version or confinement line that differs, as compare.md shows it."""

    name: str
    a: str
    b: str


def _flip_record(flip: StepFlip) -> JSONObject:
    return {
        "problem_id": flip.problem_id,
        "step_id": flip.step_id,
        "status_a": flip.status_a,
        "status_b": flip.status_b,
    }


def _flip_of(record: FrozenObject) -> StepFlip:
    return StepFlip(
        text(record.get("problem_id")),
        text(record.get("step_id")),
        _cell_status(record.get("status_a")),
        _cell_status(record.get("status_b")),
    )


def _cell_status(value: Frozen) -> CellStatus:
    """A recorded cell status (the schema allows only these; anything else reads as no verdict)."""
    return next((status for status in CELL_STATUSES if status == value), "no_verdict")


@dataclass(frozen=True)
class ComparisonRecord:
    """compare.json: both runs, the compared problems, what differs, the paired tests and the flips."""

    run_a: ComparedRunRecord
    run_b: ComparedRunRecord
    compared_problems: tuple[str, ...]
    narrowed_to: str | None  # the command line's sample_ids/category that narrowed the comparison
    only_in_a: tuple[str, ...]
    only_in_b: tuple[str, ...]
    statement_differs: tuple[str, ...]
    differences: tuple[SettingDifference, ...]
    paired: PairedRecord
    problems_lost: tuple[str, ...]  # resolved in A, unresolved in B
    problems_gained: tuple[str, ...]
    steps_lost: tuple[StepFlip, ...]  # pass in A, not pass in B
    steps_gained: tuple[StepFlip, ...]

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

    def to_record(self) -> JSONObject:
        return {
            "runs": {"A": self.run_a.to_record(), "B": self.run_b.to_record()},
            "compared_problems": _id_list(self.compared_problems),
            "narrowed_to": self.narrowed_to,
            "only_in_a": _id_list(self.only_in_a),
            "only_in_b": _id_list(self.only_in_b),
            "statement_differs": _id_list(self.statement_differs),
            "setting_differences": [{"name": d.name, "a": d.a, "b": d.b} for d in self.differences],
            "paired": self.paired.to_record(),
            "problems_lost": _id_list(self.problems_lost),
            "problems_gained": _id_list(self.problems_gained),
            "steps_lost": [_flip_record(flip) for flip in self.steps_lost],
            "steps_gained": [_flip_record(flip) for flip in self.steps_gained],
        }

    @classmethod
    def from_record(cls, record: FrozenObject) -> ComparisonRecord:
        runs = obj(record.get("runs"))
        return cls(
            run_a=ComparedRunRecord.from_record(obj(runs.get("A"))),
            run_b=ComparedRunRecord.from_record(obj(runs.get("B"))),
            compared_problems=texts(record.get("compared_problems")),
            narrowed_to=optional_text(record.get("narrowed_to")),
            only_in_a=texts(record.get("only_in_a")),
            only_in_b=texts(record.get("only_in_b")),
            statement_differs=texts(record.get("statement_differs")),
            differences=tuple(
                SettingDifference(text(d.get("name")), text(d.get("a")), text(d.get("b")))
                for d in objects(record.get("setting_differences"))
            ),
            paired=PairedRecord.from_record(obj(record.get("paired"))),
            problems_lost=texts(record.get("problems_lost")),
            problems_gained=texts(record.get("problems_gained")),
            steps_lost=tuple(_flip_of(flip) for flip in objects(record.get("steps_lost"))),
            steps_gained=tuple(_flip_of(flip) for flip in objects(record.get("steps_gained"))),
        )


def read_comparison_record(path: Path) -> ComparisonRecord | None:
    """The compare.json at `path` when it exists and validates (parsed once per file version); None otherwise."""
    return read_typed(path, COMPARE_KIND, ComparisonRecord.from_record)
