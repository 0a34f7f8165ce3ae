"""compare.json: the record of a comparison of two runs, beside compare.md and compare.html.

`ComparisonRecord` is deeply immutable (frozen dataclasses and tuples) and is the only code that knows the
record's keys: `ComparisonRecord.of` builds it from a `stages.compare.comparison.Comparison`, `to_record` gives the JSON
mapping that `schemas/compare.schema.json` validates (on write and on read), `from_record` reads one back.
Counts are those of the compared problems, attempt 1 (as compare.md); deltas are left to the reader (B - A).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.compare.comparison import AttemptMetrics, ComparedRun, Comparison, StepFlip
from stages.compare.paired import PairedSection
from stages.records.results import CELL_STATUSES, CellStatus
from stages.storage.artifacts import read_artifact
from stages.summarize.uncertainty.paired import STEP_DIFFERENCE_DESCRIPTION, STEP_DIFFERENCE_METHOD

# What `paired.steps` low and high were in comparisons written before the method was recorded.
EARLIER_STEP_METHOD = "wald_clustered"
EARLIER_STEP_DESCRIPTION = "D +- 1.96 SE, the SE clustered by problem (written before the method was recorded)"

COMPARE_KIND = "compare"  # schemas/compare.schema.json


def _ids(value: Any) -> tuple[str, ...]:
    return tuple(str(item) for item in value)


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class RunCounts:
    """The summary's counts of one run over the compared problems."""

    problems: int
    resolved: int
    steps_passed: int
    steps_scored: int
    errors: int
    no_details: int

    def to_record(self) -> dict[str, int]:
        return {
            "main_problem_total": self.problems,
            "main_problem_resolved": self.resolved,
            "subproblem_correct": self.steps_passed,
            "subproblem_total": self.steps_scored,
            "Error": self.errors,
            "no_details": self.no_details,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> RunCounts:
        return cls(
            problems=int(record["main_problem_total"]),
            resolved=int(record["main_problem_resolved"]),
            steps_passed=int(record["subproblem_correct"]),
            steps_scored=int(record["subproblem_total"]),
            errors=int(record["Error"]),
            no_details=int(record["no_details"]),
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

    def to_record(self) -> dict[str, Any]:
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
    def from_record(cls, record: Mapping[str, Any]) -> RunCost:
        return cls(
            input_tokens=int(record["input_tokens"]),
            output_tokens=int(record["output_tokens"]),
            total_tokens=int(record["total_tokens"]),
            calls=int(record["calls"]),
            latency_s=float(record["latency_s"]),
            attempts_reporting=int(record["attempts_reporting"]),
            attempts_total=int(record["attempts_total"]),
        )


@dataclass(frozen=True)
class RunAttempts:
    """A run's attempt metrics (stages.summarize.passk) when a compared run holds several attempts, or why they are not
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

    def to_record(self) -> dict[str, Any]:
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
    def from_record(cls, record: Mapping[str, Any]) -> RunAttempts:
        def whole(key: str) -> int | None:
            return None if record[key] is None else int(record[key])

        return cls(
            attempts=whole("attempts"),
            mean_resolve_rate=_optional_float(record["mean_main_problem_resolve_rate"]),
            mean_step_rate=_optional_float(record["mean_subproblem_rate"]),
            pass_at_k=tuple(sorted((int(k), float(value)) for k, value in record["pass_at_k"].items())),
            resolved_any=whole("resolved_by_any_attempt"),
            steps_passed_any=whole("steps_passed_by_any_attempt"),
            error=None if record["error"] is None else str(record["error"]),
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
        )

    def to_record(self) -> dict[str, Any]:
        return {
            "run_dir": self.run_dir,
            "model": self.model,
            "run": self.run,
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
    def from_record(cls, record: Mapping[str, Any]) -> ComparedRunRecord:
        counts = record["status_counts"]
        return cls(
            run_dir=str(record["run_dir"]),
            model=str(record["model"]),
            run=str(record["run"]),
            split=str(record["split"]),
            mode=str(record["mode"]),
            with_background=str(record["with_background"]),
            problems_selected=int(record["problems_selected"]),
            counts=RunCounts.from_record(record["counts"]),
            # a comparison written before `not_generated` was counted has no such key
            statuses=tuple((status, int(counts[status])) for status in CELL_STATUSES if status in counts),
            cost=RunCost.from_record(record["cost"]),
            attempts=None if record["attempts"] is None else RunAttempts.from_record(record["attempts"]),
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

    def to_record(self) -> dict[str, Any]:
        return {
            "problems": list(self.problems),
            "only_scored_a": list(self.only_scored_a),
            "only_scored_b": list(self.only_scored_b),
            "neither_scored": list(self.neither_scored),
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
    def from_record(cls, record: Mapping[str, Any]) -> PairedRecord:
        resolved, steps = record["resolved"], record["steps"]
        return cls(
            problems=_ids(record["problems"]),
            only_scored_a=_ids(record["only_scored_a"]),
            only_scored_b=_ids(record["only_scored_b"]),
            neither_scored=_ids(record["neither_scored"]),
            resolved_both=int(resolved["both"]),
            resolved_neither=int(resolved["neither"]),
            resolved_only_a=int(resolved["only_a"]),
            resolved_only_b=int(resolved["only_b"]),
            mcnemar_p=float(resolved["mcnemar_p"]),
            steps=int(steps["compared"]),
            step_difference=_optional_float(steps["difference"]),
            step_se=_optional_float(steps["se"]),
            step_low=_optional_float(steps["low"]),
            step_high=_optional_float(steps["high"]),
            step_p=_optional_float(steps["p_value"]),
            step_method=str(steps.get("method", EARLIER_STEP_METHOD)),
            step_description=str(steps.get("description", EARLIER_STEP_DESCRIPTION)),
            step_correlation=_optional_float(steps.get("correlation")),
        )


@dataclass(frozen=True)
class SettingDifference:
    """A recorded setting, library version or confinement line that differs, as compare.md shows it."""

    name: str
    a: str
    b: str


def _flip_record(flip: StepFlip) -> dict[str, str]:
    return {
        "problem_id": flip.problem_id,
        "step_id": flip.step_id,
        "status_a": flip.status_a,
        "status_b": flip.status_b,
    }


def _flip_of(record: Mapping[str, Any]) -> StepFlip:
    return StepFlip(str(record["problem_id"]), str(record["step_id"]), record["status_a"], record["status_b"])


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

    def to_record(self) -> dict[str, Any]:
        return {
            "runs": {"A": self.run_a.to_record(), "B": self.run_b.to_record()},
            "compared_problems": list(self.compared_problems),
            "narrowed_to": self.narrowed_to,
            "only_in_a": list(self.only_in_a),
            "only_in_b": list(self.only_in_b),
            "statement_differs": list(self.statement_differs),
            "setting_differences": [{"name": d.name, "a": d.a, "b": d.b} for d in self.differences],
            "paired": self.paired.to_record(),
            "problems_lost": list(self.problems_lost),
            "problems_gained": list(self.problems_gained),
            "steps_lost": [_flip_record(flip) for flip in self.steps_lost],
            "steps_gained": [_flip_record(flip) for flip in self.steps_gained],
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> ComparisonRecord:
        narrowed = record["narrowed_to"]
        return cls(
            run_a=ComparedRunRecord.from_record(record["runs"]["A"]),
            run_b=ComparedRunRecord.from_record(record["runs"]["B"]),
            compared_problems=_ids(record["compared_problems"]),
            narrowed_to=None if narrowed is None else str(narrowed),
            only_in_a=_ids(record["only_in_a"]),
            only_in_b=_ids(record["only_in_b"]),
            statement_differs=_ids(record["statement_differs"]),
            differences=tuple(
                SettingDifference(str(d["name"]), str(d["a"]), str(d["b"])) for d in record["setting_differences"]
            ),
            paired=PairedRecord.from_record(record["paired"]),
            problems_lost=_ids(record["problems_lost"]),
            problems_gained=_ids(record["problems_gained"]),
            steps_lost=tuple(_flip_of(flip) for flip in record["steps_lost"]),
            steps_gained=tuple(_flip_of(flip) for flip in record["steps_gained"]),
        )


def read_comparison_record(path: Path) -> ComparisonRecord | None:
    """The compare.json at `path` when it exists and validates; None otherwise."""
    record = read_artifact(path, COMPARE_KIND)
    return None if record is None else ComparisonRecord.from_record(record)
