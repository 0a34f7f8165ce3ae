"""summary.json: the run's metrics and problem rows under the names of the results contract.

`Summary` is the whole record: the summarize stage builds it and writes `to_record()`, readers (whether the
summary is current, which plots it lists, which problems failed, the tool-call outcomes, the steps without
targets, each problem's step statuses) read its fields. Every record here is declared
(`stages.records.declared`): its fields, in the file's key order, are the one statement of the file's keys, and
the aggregate blocks (the groups, usage, cost, tool use, attempts, the interval methods) are typed records of
their own, the headline (HEADLINE_KEYS at the top level) a group's record. Two values stay free-form JSON: the
recorded settings of `RunSetup` (any setting's value) and `fingerprint_parts`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from dataclasses import field as dataclass_field  # within SummaryProblem, whose `field` is a key
from functools import cached_property
from pathlib import Path
from typing import Literal, Self, get_args

from stages.benchmark.datasets import DEFAULT_DATASET
from stages.benchmark.protocol import CARRY_MODES
from stages.config.settings import SPLITS
from stages.records.declared import Declared, key
from stages.records.endpoint import EndpointUse
from stages.records.generation import ToolStats
from stages.records.invocations import Stage
from stages.records.schema_of import ref, schema_of
from stages.records.stamp import Stamp
from stages.records.usage import Usage
from stages.storage.artifacts import read_typed
from stages.storage.json_values import (
    EMPTY,
    Frozen,
    FrozenObject,
    JSONObject,
    JSONValue,
    freeze_object,
    obj,
    objects,
)

KIND = "summary"
CURRENCY = "USD"  # of every price and cost

# The headline counts and rates, spread at the top level of the record (`Metrics.as_dict`), in written order.
HEADLINE_KEYS = (
    "main_problem_resolve_rate",
    "subproblem",
    "Total",
    "Evaluated",
    "Error",
    "main_problem_resolved",
    "main_problem_total",
    "subproblem_correct",
    "subproblem_total",
    "skipped_steps",
    "intervals",
)


def _tool_stats(value: Frozen) -> ToolStats:
    return ToolStats.from_record(obj(value))


def _tool_stats_record(stats: ToolStats) -> JSONValue:
    return dict(stats.to_record())


# a problem's and a step's tool-call counts (`ToolStats` is a generation record, read and written by its own methods)
TOOL_STATS = key(read=_tool_stats, write=_tool_stats_record, schema=schema_of(ToolStats))
COUNT: JSONObject = {"minimum": 0}  # a count's schema words beyond its type
RATE: JSONObject = {"minimum": 0, "maximum": 1}
COST: JSONObject = {"minimum": 0}


@dataclass(frozen=True)
class FailedProblem(Declared):
    problem_id: str
    reason: str


@dataclass(frozen=True)
class StepOutcome(Declared):
    """A step's status and the one-line reason (a problem's steps and its first failure)."""

    step_id: str
    status: str
    reason: str | None = field(metadata=key(schema={"type": "string"}))  # null is never written here


STEP_STATUSES: list[JSONValue] = [
    "pass", "fail", "timeout", "parse_error", "eval_error", "skipped", "not_generated", "no_verdict",
]  # fmt: skip


@dataclass(frozen=True)
class SummaryStep(Declared):
    record_schema = {"required": ["step_id", "status"]}  # a summary's steps, those written before reasons included

    step_id: str
    status: str = field(metadata=key(schema={"enum": STEP_STATUSES}))
    reason: str | None = field(default=None, metadata=key(schema={"type": "string"}))  # null is never written here
    tools: ToolStats = field(default_factory=ToolStats, metadata=TOOL_STATS)


@dataclass(frozen=True, kw_only=True)
class SummaryProblem(Declared):
    # the keys every summary's problems carry (those written before the others existed included)
    record_schema = {
        "required": [
            "problem_id", "split", "category", "state", "resolved", "steps_passed", "steps_scored", "steps_skipped",
            "first_failure", "steps", "usage", "latency_s", "error",
        ]
    }  # fmt: skip

    problem_id: str
    split: str = ""
    category: str = ""
    field: str = ""
    subfield: str = ""
    state: str = dataclass_field(
        default="",
        metadata=key(
            schema={
                "enum": ["complete", "generation_error", "missing_generation", "missing_details", "invalid_details"]
            }
        ),
    )
    resolved: bool = False
    steps_passed: int = dataclass_field(default=0, metadata=key(schema=COUNT))
    steps_scored: int = dataclass_field(default=0, metadata=key(schema=COUNT))
    steps_skipped: int = dataclass_field(default=0, metadata=key(schema=COUNT))
    first_failure: StepOutcome | None = None
    steps: tuple[SummaryStep, ...]
    tools: ToolStats = dataclass_field(default_factory=ToolStats, metadata=TOOL_STATS)
    usage: RecordedUsage | None = None
    latency_s: float | None = dataclass_field(default=None, metadata=key(schema=COST))
    cost: float | None = dataclass_field(  # US dollars over the attempts; None without prices
        default=None, metadata=key(schema={"minimum": 0, "description": "all attempts; null without prices or usage"})
    )
    attempt_costs: tuple[float | None, ...] = dataclass_field(
        default=(), metadata=key(schema={"items": {"type": ["number", "null"], "minimum": 0}})
    )
    error: str | None = dataclass_field(
        default=None, metadata=key(schema={"description": "why generation or scoring failed; null otherwise"})
    )

    @property
    def step_ids(self) -> frozenset[str]:
        return frozenset(step.step_id for step in self.steps)


def _of_the_original(identity: RunIdentity) -> bool:
    """Summaries of the original dataset written before datasets existed carry no dataset keys (and read back so)."""
    return identity.dataset == DEFAULT_DATASET and identity.problems_md5 is None


@dataclass(frozen=True, kw_only=True)
class RunIdentity(Declared):
    """What was run: model, run name, the selection's filters and the generation settings."""

    model: str
    run: str
    # a summary written before datasets existed is of the original
    dataset: str = field(
        default=DEFAULT_DATASET,
        metadata=key(
            omit=_of_the_original,
            schema={"description": "the run's dataset (absent in summaries written before datasets: original)"},
        ),
    )
    # a manifest-bound dataset: the md5 its manifest states for the problem file
    problems_md5: str | None = field(
        default=None,
        metadata=key(
            omit=_of_the_original,
            schema={"description": "a manifest-bound dataset: the md5 its manifest states for the problem file"},
        ),
    )
    split: str = field(metadata=key(schema={"enum": list(SPLITS)}))
    category: tuple[str, ...]
    sample_ids: tuple[str, ...]
    mode: str
    with_background: bool
    # None in a summary written before it was recorded (never written null)
    carry: str | None = field(default=None, metadata=key(schema={"enum": list(CARRY_MODES)}))
    attempts_per_problem: int | None = field(  # likewise
        default=None, metadata=key(schema={"type": "integer", "minimum": 1})
    )


@dataclass(frozen=True)
class SummaryTargets(Declared):
    kind: str = field(metadata=key(schema={"enum": ["official", "explicit", "derived", "missing", "unknown"]}))
    note: str | None = field(metadata=key(schema={"type": "string"}))  # null is never written here


CaveatKind = Literal[
    "targets_derived",
    "targets_missing",
    "targets_unknown",
    "tool_use_as_naive",
    "subset",
    "weak_tests_passed",
    "problems_failed",
    "steps_not_generated",
    "snippets_elsewhere",
    "fewer_environments",
]
CAVEAT_KINDS: tuple[CaveatKind, ...] = get_args(CaveatKind)


@dataclass(frozen=True)
class Caveat(Declared):
    """Something a reader of the run's headline must know (derived targets, a subset, ...), in one phrase."""

    record_schema = {"additionalProperties": False}

    kind: CaveatKind
    text: str


def caveats_of(value: Frozen) -> tuple[Caveat, ...]:
    """The caveats of an array, those of a kind this version does not know left out."""
    return tuple(Caveat.from_record(record) for record in objects(value) if record.get("kind") in CAVEAT_KINDS)


def _recorded_caveats(value: Frozen) -> tuple[Caveat, ...] | None:
    return None if value is None else caveats_of(value)


def _caveat_records(caveats: tuple[Caveat, ...]) -> JSONValue:
    return [caveat.to_record() for caveat in caveats]


def caveats_text(caveats: tuple[Caveat, ...]) -> str:
    """`targets derived from reference code; 2 of 80 problems (a subset)`; "" without caveats."""
    return "; ".join(caveat.text for caveat in caveats)


@dataclass(frozen=True)
class PublishedSetting(Declared):
    """Whether the run is a published setting (`stages.summarize.published_setting`), decided once per run: the
    protocol judged against ("" when the run's settings are those of none) and, when it is not, why not."""

    record_schema = {
        "description": "whether the run is a published setting (protocols.json), decided once per run: every setting "
        "of the protocol matches, every problem of the split selected, every scored step judged against official "
        "targets, one attempt (absent in summaries written before)",
        "additionalProperties": False,
    }

    protocol: str = field(
        metadata=key(
            schema={"description": "the protocol judged against; empty when the run's settings are those of none"}
        )
    )
    title: str
    is_published: bool = field(init=False)  # derived: a protocol and no reason against it
    reasons: tuple[str, ...] = field(  # empty: the run is that published setting
        metadata=key(schema={"description": "why the run is not that published setting; empty when it is"})
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_published", bool(self.protocol) and not self.reasons)

    @property
    def text(self) -> str:
        """`the published setting scicode-paper (...)` or `not the published setting scicode-paper: ...`."""
        if self.is_published:
            return f"the published setting {self.protocol} ({self.title})"
        if not self.protocol:
            return "not a published setting: " + "; ".join(self.reasons)
        return f"not the published setting {self.protocol}: " + "; ".join(self.reasons)

    @property
    def short(self) -> str:
        """The terminal's form: `text`, but a run of no protocol says only that (its caveats say the rest)."""
        return (
            self.text if self.protocol else "not a published setting (its settings are those of no published protocol)"
        )


PERCENT: JSONObject = {"minimum": 0, "maximum": 100, "description": "percent, as published"}


@dataclass(frozen=True)
class ReferenceFigure(Declared):
    """A published result of the run's model (`stages/benchmark/published.json`) set beside the run's figures: when
    the run is that row's setting, whether each published rate lies in the run's 95% interval; else why the two are
    not comparable."""

    record_schema = {"additionalProperties": False}

    model: str
    protocol: str
    source: str
    main_problem_resolve_rate: float = field(metadata=key(schema=PERCENT))  # percent, as published
    subproblem: float = field(metadata=key(schema=PERCENT))  # percent, as published
    comparable: bool = field(  # derived: no reason against the comparison
        init=False, metadata=key(schema={"description": "the run is that row's setting"})
    )
    reasons: tuple[str, ...] = field(  # why not comparable; empty when comparable
        metadata=key(schema={"description": "why not comparable; empty when comparable"})
    )
    resolve_inside: bool | None = field(  # None: not comparable, or the run has no interval
        default=None,
        metadata=key(
            schema={
                "description": "the published resolve rate lies in the run's 95% interval (null: not comparable or "
                "no interval)"
            }
        ),
    )
    steps_inside: bool | None = field(
        default=None,
        metadata=key(schema={"description": "the published subproblem rate lies in the run's 95% step interval"}),
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "comparable", not self.reasons)

    @property
    def text(self) -> str:
        """`GPT-4o (scicode-paper): resolved 1.5%, inside the run's 95% interval; steps 25.0%, outside it` or
        `...: not comparable: 3 of the 65 problems ...`."""
        head = f"{self.model} ({self.protocol}): resolved {self.main_problem_resolve_rate:.1f}%"
        if not self.comparable:
            return f"{head}, steps {self.subproblem:.1f}%; not comparable: " + "; ".join(self.reasons)
        return (
            f"{head}{_inside_text(self.resolve_inside)}; steps {self.subproblem:.1f}%{_inside_text(self.steps_inside)}"
        )


def _inside_text(inside: bool | None) -> str:
    if inside is None:
        return " (the run has no 95% interval)"
    return ", inside the run's 95% interval" if inside else ", outside the run's 95% interval"


@dataclass(frozen=True)
class RecordedInvocation(Declared):
    """One invocation that generated or scored (`stages.records.invocations`), as summary.json records it."""

    record_schema = {"additionalProperties": False}

    started: str
    ended: str
    seconds: float = field(metadata=key(schema=COUNT))
    stages: tuple[str, ...] = field(metadata=key(schema={"items": {"enum": list(get_args(Stage))}}))
    problems: int = field(metadata=key(schema=COUNT))

    @property
    def text(self) -> str:
        """`2026-01-02T03:04:05Z to 2026-01-02T03:07:00Z (175 s; generate, score; 2 problems)`."""
        return (
            f"{self.started} to {self.ended} ({self.seconds:.0f} s; {', '.join(self.stages)}; "
            f"{self.problems} problem(s))"
        )


@dataclass(frozen=True)
class ResolveInterval(Declared):
    """The main-problem resolve rate with its 95% interval (`stages.numbers.uncertainty.intervals.ResolveRate`)."""

    estimate: float | None
    low: float | None
    high: float | None
    method: str = field(metadata=key(schema={"const": "wilson"}))
    problems: int = field(metadata=key(schema=COUNT))


@dataclass(frozen=True, kw_only=True)
class StepInterval(Declared):
    """The step pass rate with its problem-clustered SE, 95% interval and effective sample size (None where the
    rate has no scored step, or in a summary written before the effective size was recorded)."""

    estimate: float | None
    se: float | None = field(metadata=key(schema={"minimum": 0}))
    low: float | None
    high: float | None
    method: str = field(
        metadata=key(schema={"description": "clustered_wilson (older summaries: 'clustered by problem', p +- 1.96 SE)"})
    )
    problems: int = field(metadata=key(schema=COUNT))
    steps: int = field(metadata=key(schema=COUNT))
    # absent in summaries written before the effective size was recorded
    effective_n: float | None = field(
        default=None,
        metadata=key(
            required=False,
            schema={"exclusiveMinimum": 0, "description": "the steps' effective sample size, N / design_effect"},
        ),
    )
    design_effect: float | None = field(default=None, metadata=key(required=False, schema={"minimum": 1}))
    design_effect_estimated: bool | None = field(
        default=None,
        metadata=key(
            required=False,
            schema={
                "description": "false where it could not be estimated (0%, 100%, one problem) and its upper bound "
                "was taken"
            },
        ),
    )


@dataclass(frozen=True)
class Intervals(Declared):
    """The 95% intervals of a group's two rates."""

    main_problem_resolve_rate: ResolveInterval
    subproblem: StepInterval


def _without_field(group: GroupRecord) -> bool:
    """Only a subfield's group names its field."""
    return group.field is None


@dataclass(frozen=True, kw_only=True)
class GroupRecord(Declared):
    """The counts and rates of a group of problems under the results contract's names (HEADLINE_KEYS), and for a
    subfield its field; `intervals` is None for a group too small for them."""

    field: str | None = dataclass_field(default=None, metadata=key(omit=_without_field, schema={"type": "string"}))
    resolve_rate: float | None = dataclass_field(default=None, metadata=key("main_problem_resolve_rate", schema=RATE))
    step_rate: float | None = dataclass_field(default=None, metadata=key("subproblem", schema=RATE))
    total: int = dataclass_field(default=0, metadata=key("Total", schema=COUNT))
    evaluated: int = dataclass_field(default=0, metadata=key("Evaluated", schema=COUNT))
    errors: int = dataclass_field(default=0, metadata=key("Error", schema=COUNT))
    resolved: int = dataclass_field(default=0, metadata=key("main_problem_resolved", schema=COUNT))
    problems: int = dataclass_field(default=0, metadata=key("main_problem_total", schema=COUNT))
    steps_passed: int = dataclass_field(default=0, metadata=key("subproblem_correct", schema=COUNT))
    steps_scored: int = dataclass_field(default=0, metadata=key("subproblem_total", schema=COUNT))
    steps_skipped: int = dataclass_field(default=0, metadata=key("skipped_steps", schema=COUNT))
    intervals: Intervals | None = dataclass_field(
        default=None,
        metadata=key(
            required=False,  # a group's (the headline's is required)
            schema={
                "description": "null for a group of fewer than uncertainty.min_group_problems problems (counts only)"
            },
        ),
    )


def group_schema(*, with_field: bool) -> JSONObject:
    """The schema of a group's record: a subfield's names its field; the headline's keys are a group's but `field`."""
    schema = schema_of(GroupRecord)
    properties = dict(schema["properties"])  # type: ignore[arg-type]
    if not with_field:
        del properties["field"]
        return {**schema, "properties": properties}
    return {**schema, "required": [*schema["required"], "field"]}  # type: ignore[misc]


@dataclass(frozen=True)
class Groups(Declared):
    """The metrics by category, field, subfield (each with its field) and split."""

    by_category: Mapping[str, GroupRecord] = field(
        metadata=key(schema={"description": "per selection-entry category (Field / Subfield)"})
    )
    by_field: Mapping[str, GroupRecord] = field(metadata=key(required=False))  # absent in early summaries
    by_subfield: Mapping[str, GroupRecord] = field(
        metadata=key(required=False, schema={"additionalProperties": group_schema(with_field=True)})
    )
    by_split: Mapping[str, GroupRecord]


@dataclass(frozen=True)
class RateInterval(Declared):
    """The 95% interval of a rate, [low, high]."""

    low: float
    high: float

    @classmethod
    def between(cls, low: float | None, high: float | None) -> RateInterval | None:
        """The interval of two recorded ends; None where it has no ends."""
        return None if low is None or high is None else cls(low, high)


@dataclass(frozen=True)
class GroupMetrics:
    """The counts of a group of problems (the headline's, a field's, a subfield's, a split's) and the 95% intervals of
    both rates, read from their record (HEADLINE_KEYS but the rates); a group too small for intervals has none."""

    total: int
    evaluated: int
    errors: int
    resolved: int
    steps_passed: int
    steps_scored: int
    steps_skipped: int
    resolve_interval: RateInterval | None
    step_interval: RateInterval | None
    effective_n: float | None  # what the scored steps are worth clustered by problem (None: not estimated)
    interval_steps: int  # the steps the step interval covers

    @classmethod
    def of(cls, group: GroupRecord) -> GroupMetrics:
        intervals = group.intervals
        resolve = intervals.main_problem_resolve_rate if intervals else None
        steps = intervals.subproblem if intervals else None
        return cls(
            total=group.total,
            evaluated=group.evaluated,
            errors=group.errors,
            resolved=group.resolved,
            steps_passed=group.steps_passed,
            steps_scored=group.steps_scored,
            steps_skipped=group.steps_skipped,
            resolve_interval=RateInterval.between(resolve.low, resolve.high) if resolve else None,
            step_interval=RateInterval.between(steps.low, steps.high) if steps else None,
            effective_n=steps.effective_n if steps else None,
            interval_steps=steps.steps if steps else 0,
        )

    @classmethod
    def from_record(cls, record: FrozenObject) -> GroupMetrics:
        """The metrics of a group's record (the headline's keys at the top of summary.json)."""
        return cls.of(GroupRecord.from_record(record))


def group_metrics(groups: Mapping[str, GroupRecord]) -> dict[str, GroupMetrics]:
    """Each group's metrics by name, in recorded order (`Groups`' blocks)."""
    return {name: GroupMetrics.of(record) for name, record in groups.items()}


@dataclass(frozen=True, kw_only=True)
class RecordedUsage(Declared):
    """Token usage as `stages.records.usage.Usage.to_record` writes it (counts the API did not state left out)."""

    input_tokens: int = field(default=0, metadata=key(schema=COUNT))
    output_tokens: int = field(default=0, metadata=key(schema=COUNT))
    total_tokens: int = field(default=0, metadata=key(schema=COUNT))
    calls: int = field(default=0, metadata=key(schema=COUNT))
    cached_input_tokens: int = field(default=0, metadata=key(omit="if_default", schema=COUNT))
    unknown_calls: int = field(
        default=0,
        metadata=key(
            omit="if_default",
            schema={"minimum": 1, "description": "calls whose reply stated no usable token count (counted as 0)"},
        ),
    )

    @classmethod
    def of(cls, usage: Usage) -> Self:
        return cls(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            total_tokens=usage.total_tokens,
            calls=usage.calls,
            cached_input_tokens=usage.cached_input_tokens,
            unknown_calls=usage.unknown_calls,
        )


@dataclass(frozen=True, kw_only=True)
class UsageTotals(RecordedUsage):
    """The run's usage summed over its problems, and how many problems report it."""

    problems_reporting: int = field(default=0, metadata=key(schema=COUNT))


@dataclass(frozen=True)
class RecordedPrices(Declared):
    """The price settings a cost was computed with (US dollars per million tokens; `stages.numbers.pricing`)."""

    currency: str = field(init=False, default=CURRENCY)  # derived: every price is in US dollars
    input_per_mtok: float = field(metadata=key(schema=COST))
    output_per_mtok: float = field(metadata=key(schema=COST))
    cached_input_per_mtok: float | None = field(default=None, metadata=key(schema=COST))


@dataclass(frozen=True)
class RunCost(Declared):
    """The run's cost: in total, per attempt index (summed over problems) and the attempts it covers; every figure
    None without prices (tokens only)."""

    record_schema = {"description": "cost from the price settings (null figures without prices: tokens only)"}

    prices: RecordedPrices | None
    total: float | None = field(metadata=key(schema=COST))
    per_attempt: tuple[float | None, ...] = field(metadata=key(schema={"items": {"type": ["number", "null"], **COST}}))
    attempts_priced: int = field(metadata=key(schema=COUNT))
    attempts_total: int = field(metadata=key(schema=COUNT))


@dataclass(frozen=True)
class ToolUse(Declared):
    """Tool calls and their outcomes in the scored attempt and in every attempt, and whether a tool_use run's model
    made none at all (a server that ignores `tools` behaves as naive)."""

    record_schema = {
        "description": "tool calls and their outcomes, counted from the generation trajectories",
        "required": ["attempt_scored", "all_attempts"],  # behaved_as_naive: absent in early summaries
    }

    attempt_scored: ToolStats = field(metadata=TOOL_STATS)
    all_attempts: ToolStats = field(metadata=TOOL_STATS)
    behaved_as_naive: bool = field(
        default=False, metadata=key(schema={"description": "tool_use run whose model made no tool call at all"})
    )


@dataclass(frozen=True)
class InspectAiView(Declared):
    """The step view of the official inspect_ai task: every step of a problem in its denominator, prefilled ones
    included and never passed."""

    record_schema = {
        "description": "step view of the official inspect_ai task: prefilled steps in the step denominator and never "
        "passed"
    }

    steps_passed: int = field(metadata=key("subproblem_correct", schema=COUNT))
    steps_total: int = field(metadata=key("subproblem_total", schema=COUNT))
    step_rate: float | None = field(metadata=key("subproblem", schema=RATE))
    resolved: int = field(metadata=key("main_problem_resolved", schema=COUNT))
    problems: int = field(metadata=key("main_problem_total", schema=COUNT))
    resolve_rate: float | None = field(metadata=key("main_problem_resolve_rate", schema=RATE))
    note: str


@dataclass(frozen=True)
class PassAtKMethod(Declared):
    """How pass@k's intervals are computed (`stages.numbers.uncertainty.intervals`)."""

    record_schema = {
        "description": "how an interval was computed: a method name (clustered_wilson; older summaries: a bootstrap "
        "with its resamples and seed) and its description",
        "required": ["method", "level"],
    }

    method: str
    level: float
    description: str


@dataclass(frozen=True, kw_only=True)
class IntervalMethods(Declared):
    """What summary.json's intervals mean: their level, each method described, and the smallest group given
    intervals (`stages.numbers.uncertainty.intervals.interval_methods`)."""

    record_schema = {
        "description": "what the intervals are: level, each method described, smallest group given intervals"
    }

    level: float = field(metadata=key(schema={"exclusiveMinimum": 0, "exclusiveMaximum": 1}))
    resolve: str = field(metadata=key("main_problem_resolve_rate"))
    steps: str = field(metadata=key("subproblem"))
    pass_at_k: PassAtKMethod
    min_group_problems: int = field(metadata=key(schema={"minimum": 1}))


@dataclass(frozen=True, kw_only=True)
class AttemptCounts(Declared):
    """Resolved problems and passed steps over the problems, with both rates (one attempt's, or any attempt's)."""

    resolved: int = dataclass_field(metadata=key("main_problem_resolved"))
    problems: int = dataclass_field(metadata=key("main_problem_total"))
    resolve_rate: float | None = dataclass_field(metadata=key("main_problem_resolve_rate"))
    steps_passed: int = dataclass_field(metadata=key("subproblem_correct"))
    steps_scored: int = dataclass_field(metadata=key("subproblem_total"))
    step_rate: float | None = dataclass_field(metadata=key("subproblem"))


@dataclass(frozen=True, kw_only=True)
class AttemptRow(Declared):
    """One attempt's counts (`attempt` from 0)."""

    attempt: int
    counts: AttemptCounts = dataclass_field(metadata=key(flatten=True))


@dataclass(frozen=True)
class StrategyRates(Declared):
    """The headline pair under an attempt strategy."""

    main_problem_resolve_rate: float | None
    subproblem: float | None


def _not_computed(metrics: AttemptMetrics) -> bool:
    """Attempt metrics that could not be computed record only the strategy and why."""
    return metrics.error is not None


def _computed(metrics: AttemptMetrics) -> bool:
    return metrics.error is None


NUMBERS = key(omit=_not_computed)


@dataclass(frozen=True, kw_only=True)
class AttemptMetrics(Declared):
    """With attempts > 1 (`stages.numbers.passk`): per-attempt rates, pass@k by k with their 95% intervals, both
    attempt strategies; or, when the details files disagree on the number of attempts, why not."""

    strategy: str
    error: str | None = dataclass_field(default=None, metadata=key(omit=_computed))
    problems: int = dataclass_field(default=0, metadata=NUMBERS)
    attempts: int = dataclass_field(default=0, metadata=NUMBERS)
    per_attempt: tuple[AttemptRow, ...] = dataclass_field(default=(), metadata=NUMBERS)
    mean_main_problem_resolve_rate: float | None = dataclass_field(default=None, metadata=NUMBERS)
    mean_subproblem_rate: float | None = dataclass_field(default=None, metadata=NUMBERS)
    pass_at_k: Mapping[str, float] = dataclass_field(default_factory=dict, metadata=NUMBERS)  # k -> mean pass@k
    pass_at_k_intervals: Mapping[str, RateInterval] = dataclass_field(default_factory=dict, metadata=NUMBERS)
    interval_method: PassAtKMethod | None = dataclass_field(default=None, metadata=NUMBERS)
    any_attempt: AttemptCounts | None = dataclass_field(default=None, metadata=NUMBERS)
    strategies: Mapping[str, StrategyRates] = dataclass_field(default_factory=dict, metadata=NUMBERS)


@dataclass(frozen=True)
class ProjectVersion(Declared):
    """The version of this project that wrote the summary (None outside a checkout, `dirty` when tracked files
    differ from its commit)."""

    record_schema = {"description": "the version of this project that wrote the summary"}

    name: str
    version: str | None
    commit: str | None
    dirty: bool | None


def _endpoint_uses(value: Frozen) -> tuple[EndpointUse, ...]:
    return tuple(EndpointUse.from_record(item) for item in objects(value))


def _endpoint_use_records(uses: tuple[EndpointUse, ...]) -> JSONValue:
    return [use.to_record() for use in uses]


@dataclass(frozen=True)
class RunSetup(Declared):
    """How the run was set up beyond its identity, as summary.md's header states it: the model's endpoint, the tools
    of tool_use, where tool snippets ran, and the recorded settings that shape the scores (those of
    `stages.config.settings.RECORDED_SETTINGS` that config.json records with a value, by name)."""

    record_schema = {
        "description": "how the run was set up beyond its identity, as summary.md's header states it (absent in "
        "summaries written before)",
        "additionalProperties": False,
    }

    base_url: str | None = field(  # as config.json records it (no credentials); None where it records none
        default=None,
        metadata=key(schema={"description": "the model's endpoint as config.json records it (no credentials)"}),
    )
    tool_names: tuple[str, ...] = field(default=(), metadata=key(schema={"description": "the tools of tool_use"}))
    tool_use_max_loops: int = field(
        default=0, metadata=key(schema={"minimum": 1, "description": "model calls per step at most (tool_use)"})
    )
    snippets_ran: str = field(
        default="unknown",
        metadata=key(
            schema={"description": "where tool snippets ran (a sandbox, the local python, none in naive mode)"}
        ),
    )
    settings: FrozenObject = field(
        default_factory=lambda: EMPTY,
        metadata=key(
            schema={
                "description": "the recorded settings that shape the scores (api_protocol, model_params, timeouts, "
                "memory, executor) that config.json records with a value"
            }
        ),
    )
    # every endpoint that answered, with its steps (none recorded before); an endpoint record reads itself
    endpoints: tuple[EndpointUse, ...] = field(
        default=(),
        metadata=key(
            omit="if_empty",
            read=_endpoint_uses,
            write=_endpoint_use_records,
            schema={
                "type": "array",
                "items": ref("endpoint"),
                "description": "every endpoint that answered a step of the run (any attempt), with the steps it "
                "answered; absent when the generations record none",
            },
        ),
    )


@dataclass(frozen=True)
class EnvironmentCount(Declared):
    """One grading environment's tally over the scored steps: how many it graded (ran, or its cached verdict was
    read), how many it passed, and the steps that passed in it alone while every other environment failed them."""

    name: str
    graded: int = field(metadata=key(schema=COUNT))
    passed: int = field(metadata=key(schema=COUNT))
    only: tuple[str, ...]


@dataclass(frozen=True)
class EnvironmentsSummary(Declared):
    """Under `environments=`: every environment's tally, whether every verdict was recorded (`all_environments`),
    and how many passed steps were decided by one environment without the others running (unknown elsewhere)."""

    record_schema = {
        "description": "under environments=: each grading environment's scored steps graded (run, or read from the "
        "verdict cache) and passed, the steps that passed there alone (every other environment graded and failed "
        "them), whether every environment ran (all_environments=true), and the passes decided before the other "
        "environments ran; absent without environments="
    }

    every_verdict: bool
    counts: tuple[EnvironmentCount, ...] = field(metadata=key("environments"))
    passed_before_the_others: int = field(metadata=key(schema=COUNT))


@dataclass(frozen=True)
class WeakPass(Declared):
    """A passed step whose official tests a trivial answer passes too (`stages/benchmark/weak_tests.json`)."""

    step_id: str
    reason: str


# The schema words of the summary's blocks that no record of it declares.
STATUS_COUNTS_SCHEMA: JSONObject = {
    "type": "object",
    "required": ["pass", "fail", "timeout", "parse_error", "eval_error", "skipped", "no_verdict"],
    "additionalProperties": False,
    "properties": {
        **{str(status): {"type": "integer", "minimum": 0} for status in STEP_STATUSES},
        "not_generated": {
            "type": "integer",
            "minimum": 0,
            "description": "scored steps the model never answered (a generation error, e.g. the server down): counted "
            "apart from fail; absent in records written before",
        },
        "no_verdict": {
            "type": "integer",
            "minimum": 0,
            "description": "scored steps without a verdict (no details file, or a step missing from it)",
        },
    },
}
TOOL_CALLS_SCHEMA: JSONObject = {
    "type": "object",
    "description": "code_interpreter calls of the run by outcome (scored attempt)",
    "required": ["ok", "error", "timeout", "sandbox_error", "total"],
    "properties": {
        name: {"type": "integer", "minimum": 0} for name in ("ok", "error", "timeout", "sandbox_error", "total")
    },
}
RATE_INTERVAL_SCHEMA: JSONObject = {
    "type": "object",
    "required": ["low", "high"],
    "properties": {"low": {"type": "number", **RATE}, "high": {"type": "number", **RATE}},
}
ATTEMPTS_SCHEMA: JSONObject = {
    "type": ["object", "null"],
    "description": "with attempts > 1: per-attempt rates, pass@k, both strategies (stages.numbers.passk), or an error",
    "required": ["strategy"],
    "properties": {
        "strategy": {"enum": ["avg", "pass"]},
        "error": {"type": "string"},
        "pass_at_k_intervals": {"type": "object", "additionalProperties": RATE_INTERVAL_SCHEMA},
        "interval_method": schema_of(PassAtKMethod),
        "bootstrap": {
            "type": "object",
            "required": ["method", "resamples", "seed", "level"],
            "properties": {
                "method": {"type": "string"},
                "resamples": {"type": "integer", "minimum": 1},
                "seed": {"type": "integer"},
                "level": {"type": "number"},
            },
            "description": "summaries written before the clustered Wilson interval of pass@k",
        },
    },
}


@dataclass(frozen=True, kw_only=True)
class Summary(Declared):
    record_schema = {
        "title": "summary: the scores of one run (numbers of summary.md, machine-readable)",
        # the keys every summary carries (those written before the others existed included)
        "required": [
            "fingerprint", "status", "model", "run", "split", "category", "mode", "with_background",
            "run_started", "summarized_at", "targets", "attempt_scored",
            "main_problem_resolve_rate", "subproblem", "Total", "Evaluated", "Error",
            "main_problem_resolved", "main_problem_total", "subproblem_correct", "subproblem_total", "skipped_steps",
            "by_category", "by_split", "status_counts", "problems", "failed_problems", "usage", "latency_s", "plots",
            "intervals", "uncertainty", "cost",
        ],
        "properties": {
            "intervals": {"description": "95% intervals of the two headline rates (stages/numbers/uncertainty)"},
        },
    }  # fmt: skip

    fingerprint: str = field(  # the stamp's two keys lie apart in the record: `stamp` joins them
        metadata=key(
            schema={
                **ref("sha256"),
                "description": "sha256 of the inputs: selection, config, details and generation files",
            }
        )
    )
    status: str = field(
        metadata=key(
            schema={
                "enum": ["complete", "partial"],
                "description": "partial: some selected problem has no valid details file",
            }
        )
    )
    identity: RunIdentity = field(metadata=key(flatten=True))
    run_started: str | None = field(
        metadata=key(schema={"description": "UTC, earliest generation/details file time (else config.json time)"})
    )
    summarized_at: str
    targets: SummaryTargets
    attempt_scored: int = field(
        metadata=key(
            schema={
                "minimum": 0,
                "description": "index of the attempt of each details file that is summarized",
            }
        )
    )
    # the scored attempt's counts, rates and intervals (HEADLINE_KEYS), at the top level of the record
    headline_record: GroupRecord = field(metadata=key(flatten=True, schema=group_schema(with_field=False)))
    uncertainty: IntervalMethods
    inspect_ai_view: InspectAiView
    groups: Groups = field(metadata=key(flatten=True))
    status_counts: Mapping[str, int] = field(  # status -> steps of the scored attempt
        metadata=key(schema=STATUS_COUNTS_SCHEMA)
    )
    problems: tuple[SummaryProblem, ...]
    failed_problems: tuple[FailedProblem, ...]
    usage: UsageTotals
    latency_s: float = field(
        metadata=key(schema={"minimum": 0, "description": "sum of model latency over the problems that report it"})
    )
    cost: RunCost
    project: ProjectVersion | None = field(  # None in a summary written before it was recorded (never written null)
        metadata=key(schema={"type": "object"})
    )
    concurrency: int = field(
        metadata=key(
            schema={
                "minimum": 1,
                "description": "model calls in flight at most: the summed latency includes time queued in a server "
                "with fewer parallel slots",
            }
        )
    )
    tool_use: ToolUse
    weak_official_tests: tuple[WeakPass, ...] = field(
        metadata=key(
            schema={
                "description": "passed steps whose official tests a trivial answer passes too "
                "(stages/benchmark/weak_tests.json); still passes"
            }
        )
    )
    plots: tuple[str, ...] = field(metadata=key(schema={"description": "paths relative to the run folder"}))
    attempts: AttemptMetrics | None = field(metadata=key(schema=ATTEMPTS_SCHEMA))
    confinement: str | None = field(metadata=key(schema={"description": "the confinement recorded in config.json"}))
    fingerprint_parts: FrozenObject | None = field(
        default=None, metadata=key(omit="if_none", schema=ref("fingerprint_parts"))
    )
    # outcome -> calls, and `total` (empty in summaries written before)
    tool_calls: Mapping[str, int] = field(metadata=key(schema=TOOL_CALLS_SCHEMA))
    steps_without_targets: tuple[str, ...] = field(
        metadata=key(schema={"description": "scored steps that could not be scored: no targets"})
    )
    # None in summaries written before these were recorded (and left out of `to_record` then, so such a record
    # reads back as it was); invocations are empty for a run recorded before invocations.jsonl was written
    recorded_caveats: tuple[Caveat, ...] | None = field(
        default=None,
        metadata=key(
            "caveats",
            omit="if_none",
            read=_recorded_caveats,
            write=_caveat_records,
            schema={
                "type": "array",
                "description": "what a reader of the headline must know, shown wherever it appears (absent in "
                "summaries written before)",
                "items": schema_of(Caveat),
            },
        ),
    )
    recorded_invocations: tuple[RecordedInvocation, ...] | None = field(
        default=None,
        metadata=key(
            "invocations",
            omit="if_none",
            schema={
                "description": "each invocation that generated or scored, from the run's invocations.jsonl (absent "
                "in summaries written before; empty for runs recorded before)"
            },
        ),
    )
    recorded_setup: RunSetup | None = field(default=None, metadata=key("setup", omit="if_none"))
    # timeout verdicts of scored steps served from the verdict cache
    recorded_cached_timeouts: int | None = field(
        default=None,
        metadata=key(
            "cached_timeouts",
            omit="if_none",
            schema={
                "minimum": 0,
                "description": "timeout verdicts of scored steps served from the verdict cache (rescore=timeouts "
                "runs them again); absent in summaries written before",
            },
        ),
    )
    recorded_published: PublishedSetting | None = field(default=None, metadata=key("published_setting", omit="if_none"))
    recorded_references: tuple[ReferenceFigure, ...] | None = field(
        default=None,
        metadata=key(
            "references",
            omit="if_none",
            schema={
                "description": "published results of the run's model (published.json, matched by exact alias), "
                "beside the run's figures (absent in summaries written before)"
            },
        ),
    )
    environments: EnvironmentsSummary | None = field(default=None, metadata=key(omit="if_none"))  # `environments=`

    @property
    def stamp(self) -> Stamp:
        return Stamp(self.fingerprint, self.fingerprint_parts)

    @property
    def caveats(self) -> tuple[Caveat, ...]:
        """The run's caveats (`stages.summarize.caveats`); none in a summary written before they were recorded."""
        return self.recorded_caveats or ()

    @property
    def invocations(self) -> tuple[RecordedInvocation, ...]:
        """The invocations that generated or scored (`stages.records.invocations`); none where not recorded."""
        return self.recorded_invocations or ()

    @property
    def setup(self) -> RunSetup:
        """How the run was set up; the defaults (snippets `unknown`) in a summary written before it was recorded."""
        return self.recorded_setup or RunSetup()

    @property
    def cached_timeouts(self) -> int:
        """Timeouts served from the verdict cache; 0 in a summary written before they were counted."""
        return self.recorded_cached_timeouts or 0

    @property
    def published(self) -> PublishedSetting:
        """Whether the run is a published setting; in a summary written before this was decided, not one (the
        verdict was not made)."""
        return self.recorded_published or PublishedSetting(
            "", "", ("summarized before published settings were judged",)
        )

    @property
    def references(self) -> tuple[ReferenceFigure, ...]:
        """The published figures of the run's model; none in a summary written before they were set beside it."""
        return self.recorded_references or ()

    @property
    def headline_metrics(self) -> GroupMetrics:
        return GroupMetrics.of(self.headline_record)

    @cached_property
    def headline(self) -> FrozenObject:
        """The headline as summary.json records it (HEADLINE_KEYS), for readers of its JSON form."""
        return freeze_object(self.headline_record.to_record())


def read_summary_file(path: Path) -> Summary | None:
    """The summary at `path` (parsed once per file version in this process); None when missing or invalid."""
    return read_typed(path, KIND, Summary.from_record)
