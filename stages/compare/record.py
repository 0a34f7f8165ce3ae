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
from stages.numbers.uncertainty.paired import STEP_DIFFERENCE_DESCRIPTION, STEP_DIFFERENCE_METHOD
from stages.records.declared import Declared, KeyDeclaration, key, one_of
from stages.records.results import CELL_STATUSES, CellStatus
from stages.records.summary import COUNT, STATUS_COUNTS_SCHEMA
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
    text,
)

# What `paired.steps` low and high were in comparisons written before the method was recorded.
EARLIER_STEP_METHOD = "wald_clustered"
EARLIER_STEP_DESCRIPTION = "D +- 1.96 SE, the SE clustered by problem (written before the method was recorded)"

COMPARE_KIND = "compare"  # schemas/compare.schema.json
CLOSED: JSONObject = {"additionalProperties": False}  # an object of the declared keys only
PROBABILITY: JSONObject = {"minimum": 0, "maximum": 1}


def _optional_float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _optional_int(value: Frozen) -> int | None:
    return None if value is None else integer(value)


@dataclass(frozen=True)
class RunCounts(Declared):
    """The summary's counts of one run over the compared problems."""

    record_schema = CLOSED

    problems: int = field(metadata=key("main_problem_total", schema=COUNT))
    resolved: int = field(metadata=key("main_problem_resolved", schema=COUNT))
    steps_passed: int = field(metadata=key("subproblem_correct", schema=COUNT))
    steps_scored: int = field(metadata=key("subproblem_total", schema=COUNT))
    errors: int = field(metadata=key("Error", schema=COUNT))
    no_details: int = field(metadata=key(schema=COUNT))


@dataclass(frozen=True)
class RunCost(Declared):
    """Tokens, calls and model latency over the attempts that report both usage and latency."""

    record_schema = CLOSED

    # as the runs' files report them, unchecked
    input_tokens: int
    output_tokens: int
    total_tokens: int
    calls: int
    latency_s: float
    attempts_reporting: int = field(metadata=key(schema=COUNT))
    attempts_total: int = field(metadata=key(schema=COUNT))


def _pass_at_k(value: Frozen) -> tuple[tuple[int, float], ...]:
    """`pass_at_k`: an object of k (as text) to the estimate, read in order of k."""
    return tuple(sorted((int(k), number(estimate)) for k, estimate in obj(value).items()))


def _pass_at_k_record(pass_at_k: tuple[tuple[int, float], ...]) -> JSONValue:
    return {str(k): estimate for k, estimate in pass_at_k}


PASS_AT_K_SCHEMA: JSONObject = {  # what `_pass_at_k_record` writes: k, a whole number from 1, to its estimate
    "type": "object",
    "patternProperties": {"^[1-9][0-9]*$": {"type": "number"}},
    "additionalProperties": False,
}


@dataclass(frozen=True)
class RunAttempts(Declared):
    """A run's attempt metrics (stages.numbers.passk) when a compared run holds several attempts, or why they are not
    available (`error`, every number then None)."""

    record_schema = CLOSED

    attempts: int | None = field(metadata=key(read=_optional_int))
    mean_resolve_rate: float | None = field(metadata=key("mean_main_problem_resolve_rate"))
    mean_step_rate: float | None = field(metadata=key("mean_subproblem_rate"))
    pass_at_k: tuple[tuple[int, float], ...] = field(
        metadata=key(read=_pass_at_k, write=_pass_at_k_record, schema=PASS_AT_K_SCHEMA)
    )
    resolved_any: int | None = field(metadata=key("resolved_by_any_attempt", read=_optional_int))
    steps_passed_any: int | None = field(metadata=key("steps_passed_by_any_attempt", read=_optional_int))
    error: str | None = field(
        default=None,
        metadata=key(schema={"description": "why the attempt metrics are not available (the numbers are then null)"}),
    )

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


STATUS_COUNTS = key(  # what `_status_counts_record` writes: the summary's status counts over the compared problems
    "status_counts",
    read=_status_counts,
    write=_status_counts_record,
    schema={
        "description": "step statuses of attempt 1 over the compared problems, skipped steps included",
        **STATUS_COUNTS_SCHEMA,
    },
)


@dataclass(frozen=True, kw_only=True)
class ComparedRunRecord(Declared):
    """One side of the comparison: which run, and its counts, statuses, cost and attempt metrics."""

    record_schema = CLOSED

    run_dir: str
    model: str
    run: str
    dataset: str = field(
        default=DEFAULT_DATASET,
        metadata=key(
            omit="if_default",
            schema={
                "description": "the run's dataset; absent for the default, original (as in comparisons written "
                "before datasets)"
            },
        ),
    )
    split: str
    mode: str
    with_background: str = field(
        metadata=key(schema={"description": "true, false, or (unknown) when config.json does not say"})
    )
    problems_selected: int = field(metadata=key(schema=COUNT))
    counts: RunCounts = field(
        metadata=key(schema={"description": "the summary's counts over the compared problems, attempt 1"})
    )
    statuses: tuple[tuple[CellStatus, int], ...] = field(metadata=STATUS_COUNTS)  # in CELL_STATUSES order
    cost: RunCost = field(
        metadata=key(
            schema={
                "description": "tokens, calls and model latency summed over the attempts that report both usage "
                "and latency (as the runs' files report them, unchecked)"
            }
        )
    )
    attempts: RunAttempts | None = field(
        metadata=key(schema={"description": "null when both runs hold one attempt per problem"})
    )

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

    record_schema = {**CLOSED, "properties": {"resolved": CLOSED, "steps": CLOSED}}

    problems: tuple[str, ...]
    only_scored_a: tuple[str, ...]
    only_scored_b: tuple[str, ...]
    neither_scored: tuple[str, ...]
    resolved_both: int = field(metadata=key("both", within="resolved", schema=COUNT))
    resolved_neither: int = field(metadata=key("neither", within="resolved", schema=COUNT))
    resolved_only_a: int = field(metadata=key("only_a", within="resolved", schema=COUNT))
    resolved_only_b: int = field(metadata=key("only_b", within="resolved", schema=COUNT))
    mcnemar_p: float = field(metadata=key(within="resolved", schema=PROBABILITY))
    steps: int = field(metadata=key("compared", within="steps", schema=COUNT))
    step_difference: float | None = field(metadata=key("difference", within="steps"))
    step_se: float | None = field(metadata=key("se", within="steps"))
    step_low: float | None = field(metadata=key("low", within="steps"))
    step_high: float | None = field(metadata=key("high", within="steps"))
    step_p: float | None = field(metadata=key("p_value", within="steps"))
    # the three keys below are always written, but absent in comparisons written before they were recorded
    step_method: str = field(
        default=STEP_DIFFERENCE_METHOD,
        metadata=key(
            "method",
            within="steps",
            absent=EARLIER_STEP_METHOD,
            required=False,
            schema={
                "description": "how low and high were computed: newcombe_clustered (absent in comparisons written "
                "before it: D +- 1.96 SE)"
            },
        ),
    )
    step_description: str = field(
        default=STEP_DIFFERENCE_DESCRIPTION,
        metadata=key(
            "description",
            within="steps",
            absent=EARLIER_STEP_DESCRIPTION,
            required=False,
            schema={"description": "the method in full (docs/results-and-statistics.md, Error bars and paired tests)"},
        ),
    )
    step_correlation: float | None = field(
        default=None,
        metadata=key(
            "correlation",
            within="steps",
            required=False,
            schema={
                "minimum": -1,
                "maximum": 1,
                "description": "the paired correlation the interval used (corrected; 0 where undefined)",
            },
        ),
    )

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

    record_schema = CLOSED

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


FLIPS_SCHEMA: JSONObject = {  # what `_flip_records` writes
    "type": "array",
    "items": {
        "type": "object",
        "required": ["problem_id", "step_id", "status_a", "status_b"],
        "additionalProperties": False,
        "properties": {
            "problem_id": {"type": "string"},
            "step_id": {"type": "string"},
            "status_a": {"enum": list(CELL_STATUSES)},
            "status_b": {"enum": list(CELL_STATUSES)},
        },
    },
}


def _flips_key(description: str) -> dict[str, KeyDeclaration]:
    return key(read=_flips, write=_flip_records, schema={"description": description, **FLIPS_SCHEMA})


@dataclass(frozen=True)
class ComparisonRecord(Declared):
    """compare.json: both runs, the compared problems, what differs, the paired tests and the flips."""

    record_schema = {
        "title": "compare: two runs side by side on the problems both selected (the numbers of compare.md, "
        "machine-readable)",
        **CLOSED,
        "properties": {"runs": CLOSED},
    }

    run_a: ComparedRunRecord = field(metadata=key("A", within="runs"))
    run_b: ComparedRunRecord = field(metadata=key("B", within="runs"))
    compared_problems: tuple[str, ...] = field(
        metadata=key(
            schema={
                "description": "problems selected in both runs (narrowed by the command line's "
                "sample_ids/category), in run A's order"
            }
        )
    )
    narrowed_to: str | None = field(
        metadata=key(
            schema={
                "description": "the sample_ids/category the comparison was narrowed to; null for both whole selections"
            }
        )
    )
    only_in_a: tuple[str, ...]
    only_in_b: tuple[str, ...]
    statement_differs: tuple[str, ...] = field(
        metadata=key(schema={"description": "compared problems whose statement fingerprint differs between the runs"})
    )
    differences: tuple[SettingDifference, ...] = field(
        metadata=key(
            "setting_differences",
            schema={
                "description": "every recorded setting, library version and confinement line that differs, "
                "besides the model"
            },
        )
    )
    paired: PairedRecord = field(
        metadata=key(schema={"description": "the paired tests on the problems both runs scored, attempt 1"})
    )
    problems_lost: tuple[str, ...] = field(metadata=key(schema={"description": "resolved in A, unresolved in B"}))
    problems_gained: tuple[str, ...] = field(metadata=key(schema={"description": "unresolved in A, resolved in B"}))
    steps_lost: tuple[StepFlip, ...] = field(metadata=_flips_key("pass in A, not pass in B"))
    steps_gained: tuple[StepFlip, ...] = field(metadata=_flips_key("not pass in A, pass in B"))

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
