"""summary.json: the run's metrics and problem rows under the names of the results contract.

`Summary` is the whole record: the summarize stage builds it and writes `to_record()`, readers (whether the
summary is current, which plots it lists, which problems failed, the tool-call outcomes, the steps without
targets, each problem's step statuses) read its fields. The aggregate blocks (the headline counts, the
groups, usage, cost, tool use, attempts) are kept as read-only mappings under their contract names; only
`from_record` and `to_record` know the keys of the file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Literal, get_args

from stages.benchmark.datasets import DEFAULT_DATASET
from stages.records.endpoint import EndpointUse
from stages.records.selection import dataset_fields
from stages.records.stamp import Stamp
from stages.storage.artifacts import read_typed
from stages.storage.json_values import (
    EMPTY,
    Frozen,
    FrozenObject,
    JSONObject,
    JSONValue,
    flag,
    freeze,
    integer,
    obj,
    objects,
    optional_number,
    optional_text,
    text,
    texts,
    thaw,
    thaw_object,
)

KIND = "summary"

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


def _texts_list(values: tuple[str, ...]) -> list[JSONValue]:
    return list(values)


def _frozen_objects(value: Frozen) -> tuple[FrozenObject, ...]:
    return objects(value)


@dataclass(frozen=True)
class FailedProblem:
    problem_id: str
    reason: str

    @classmethod
    def from_record(cls, record: FrozenObject) -> FailedProblem:
        return cls(text(record.get("problem_id")), text(record.get("reason")))

    def to_record(self) -> JSONObject:
        return {"problem_id": self.problem_id, "reason": self.reason}


@dataclass(frozen=True)
class StepOutcome:
    """A step's status and the one-line reason (a problem's steps and its first failure)."""

    step_id: str
    status: str
    reason: str | None

    @classmethod
    def from_record(cls, record: FrozenObject) -> StepOutcome:
        return cls(text(record.get("step_id")), text(record.get("status")), optional_text(record.get("reason")))

    def to_record(self) -> JSONObject:
        return {"step_id": self.step_id, "status": self.status, "reason": self.reason}


@dataclass(frozen=True)
class SummaryStep:
    step_id: str
    status: str
    reason: str | None = None
    tools: FrozenObject = dataclasses.field(
        default_factory=lambda: EMPTY
    )  # the step's tool-call counts (`ToolStats.to_record`)

    @classmethod
    def from_record(cls, record: FrozenObject) -> SummaryStep:
        return cls(
            text(record.get("step_id")),
            text(record.get("status")),
            optional_text(record.get("reason")),
            obj(record.get("tools")),
        )

    def to_record(self) -> JSONObject:
        return {"step_id": self.step_id, "status": self.status, "reason": self.reason, "tools": thaw(self.tools)}


@dataclass(frozen=True)
class SummaryProblem:
    problem_id: str
    steps: tuple[SummaryStep, ...]
    split: str = ""
    category: str = ""
    field: str = ""
    subfield: str = ""
    state: str = ""
    resolved: bool = False
    steps_passed: int = 0
    steps_scored: int = 0
    steps_skipped: int = 0
    first_failure: StepOutcome | None = None
    tools: FrozenObject = dataclasses.field(default_factory=lambda: EMPTY)
    usage: FrozenObject | None = None
    latency_s: Frozen = None
    cost: Frozen = None
    attempt_costs: tuple[Frozen, ...] = ()
    error: str | None = None

    @property
    def step_ids(self) -> frozenset[str]:
        return frozenset(step.step_id for step in self.steps)

    @classmethod
    def from_record(cls, record: FrozenObject) -> SummaryProblem:
        failure = record.get("first_failure")
        usage = record.get("usage")
        return cls(
            problem_id=text(record.get("problem_id")),
            steps=tuple(SummaryStep.from_record(step) for step in objects(record.get("steps"))),
            split=text(record.get("split")),
            category=text(record.get("category")),
            field=text(record.get("field")),
            subfield=text(record.get("subfield")),
            state=text(record.get("state")),
            resolved=flag(record.get("resolved")),
            steps_passed=integer(record.get("steps_passed")),
            steps_scored=integer(record.get("steps_scored")),
            steps_skipped=integer(record.get("steps_skipped")),
            first_failure=StepOutcome.from_record(failure) if isinstance(failure, Mapping) else None,
            tools=obj(record.get("tools")),
            usage=usage if isinstance(usage, Mapping) else None,
            latency_s=record.get("latency_s"),
            cost=record.get("cost"),
            attempt_costs=_items(record.get("attempt_costs")),
            error=optional_text(record.get("error")),
        )

    def to_record(self) -> JSONObject:
        return {
            "problem_id": self.problem_id,
            "split": self.split,
            "category": self.category,
            "field": self.field,
            "subfield": self.subfield,
            "state": self.state,
            "resolved": self.resolved,
            "steps_passed": self.steps_passed,
            "steps_scored": self.steps_scored,
            "steps_skipped": self.steps_skipped,
            "first_failure": None if self.first_failure is None else self.first_failure.to_record(),
            "steps": [step.to_record() for step in self.steps],
            "tools": thaw(self.tools),
            "usage": None if self.usage is None else thaw(self.usage),
            "latency_s": thaw(self.latency_s),
            "cost": thaw(self.cost),
            "attempt_costs": [thaw(cost) for cost in self.attempt_costs],
            "error": self.error,
        }


def _items(value: Frozen) -> tuple[Frozen, ...]:
    if isinstance(value, (tuple, list)):
        return tuple(freeze(item) for item in value)
    return ()


@dataclass(frozen=True)
class RunIdentity:
    """What was run: model, run name, the selection's filters and the generation settings."""

    model: str
    run: str
    split: str
    category: tuple[str, ...]
    sample_ids: tuple[str, ...]
    mode: str
    with_background: bool
    carry: Frozen
    attempts_per_problem: Frozen
    dataset: str = DEFAULT_DATASET  # a summary written before datasets existed is of the original
    problems_md5: str | None = None  # a manifest-bound dataset: the md5 its manifest states for the problem file

    @classmethod
    def from_record(cls, record: FrozenObject) -> RunIdentity:
        return cls(
            text(record.get("model")),
            text(record.get("run")),
            text(record.get("split")),
            texts(record.get("category")),
            texts(record.get("sample_ids")),
            text(record.get("mode")),
            flag(record.get("with_background")),
            record.get("carry"),
            record.get("attempts_per_problem"),
            text(record.get("dataset"), DEFAULT_DATASET),
            optional_text(record.get("problems_md5")),
        )

    def to_record(self) -> JSONObject:
        return {
            "model": self.model,
            "run": self.run,
            **dataset_fields(self.dataset, self.problems_md5),
            "split": self.split,
            "category": _texts_list(self.category),
            "sample_ids": _texts_list(self.sample_ids),
            "mode": self.mode,
            "with_background": self.with_background,
            "carry": thaw(self.carry),
            "attempts_per_problem": thaw(self.attempts_per_problem),
        }


@dataclass(frozen=True)
class SummaryTargets:
    kind: str
    note: str | None

    @classmethod
    def from_record(cls, record: FrozenObject) -> SummaryTargets:
        return cls(text(record.get("kind")), optional_text(record.get("note")))

    def to_record(self) -> JSONObject:
        return {"kind": self.kind, "note": self.note}


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
class Caveat:
    """Something a reader of the run's headline must know (derived targets, a subset, ...), in one phrase."""

    kind: CaveatKind
    text: str

    @classmethod
    def from_record(cls, record: FrozenObject) -> Caveat | None:
        kind = text(record.get("kind"))
        found = next((known for known in CAVEAT_KINDS if known == kind), None)
        return None if found is None else cls(found, text(record.get("text")))

    def to_record(self) -> JSONObject:
        return {"kind": self.kind, "text": self.text}


def caveats_of(value: Frozen) -> tuple[Caveat, ...]:
    return tuple(found for record in objects(value) if (found := Caveat.from_record(record)) is not None)


def caveats_text(caveats: tuple[Caveat, ...]) -> str:
    """`targets derived from reference code; 2 of 80 problems (a subset)`; "" without caveats."""
    return "; ".join(caveat.text for caveat in caveats)


@dataclass(frozen=True)
class PublishedSetting:
    """Whether the run is a published setting (`stages.summarize.published_setting`), decided once per run: the
    protocol judged against ("" when the run's settings are those of none) and, when it is not, why not."""

    protocol: str
    title: str
    reasons: tuple[str, ...]  # empty: the run is that published setting

    @property
    def is_published(self) -> bool:
        return bool(self.protocol) and not self.reasons

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

    @classmethod
    def from_record(cls, record: FrozenObject) -> PublishedSetting:
        return cls(text(record.get("protocol")), text(record.get("title")), texts(record.get("reasons")))

    def to_record(self) -> JSONObject:
        return {
            "protocol": self.protocol,
            "title": self.title,
            "is_published": self.is_published,
            "reasons": _texts_list(self.reasons),
        }


@dataclass(frozen=True)
class ReferenceFigure:
    """A published result of the run's model (`stages/benchmark/published.json`) set beside the run's figures: when
    the run is that row's setting, whether each published rate lies in the run's 95% interval; else why the two are
    not comparable."""

    model: str
    protocol: str
    source: str
    main_problem_resolve_rate: float  # percent, as published
    subproblem: float  # percent, as published
    reasons: tuple[str, ...]  # why not comparable; empty when comparable
    resolve_inside: bool | None = None  # None: not comparable, or the run has no interval
    steps_inside: bool | None = None

    @property
    def comparable(self) -> bool:
        return not self.reasons

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

    @classmethod
    def from_record(cls, record: FrozenObject) -> ReferenceFigure:
        return cls(
            model=text(record.get("model")),
            protocol=text(record.get("protocol")),
            source=text(record.get("source")),
            main_problem_resolve_rate=optional_number(record.get("main_problem_resolve_rate")) or 0.0,
            subproblem=optional_number(record.get("subproblem")) or 0.0,
            reasons=texts(record.get("reasons")),
            resolve_inside=_optional_flag(record.get("resolve_inside")),
            steps_inside=_optional_flag(record.get("steps_inside")),
        )

    def to_record(self) -> JSONObject:
        return {
            "model": self.model,
            "protocol": self.protocol,
            "source": self.source,
            "main_problem_resolve_rate": self.main_problem_resolve_rate,
            "subproblem": self.subproblem,
            "comparable": self.comparable,
            "reasons": _texts_list(self.reasons),
            "resolve_inside": self.resolve_inside,
            "steps_inside": self.steps_inside,
        }


def _optional_flag(value: Frozen) -> bool | None:
    return value if isinstance(value, bool) else None


def _inside_text(inside: bool | None) -> str:
    if inside is None:
        return " (the run has no 95% interval)"
    return ", inside the run's 95% interval" if inside else ", outside the run's 95% interval"


@dataclass(frozen=True)
class RecordedInvocation:
    """One invocation that generated or scored (`stages.records.invocations`), as summary.json records it."""

    started: str
    ended: str
    seconds: float
    stages: tuple[str, ...]
    problems: int

    @classmethod
    def from_record(cls, record: FrozenObject) -> RecordedInvocation:
        seconds = record.get("seconds")
        return cls(
            text(record.get("started")),
            text(record.get("ended")),
            float(seconds) if isinstance(seconds, (int, float)) else 0.0,
            texts(record.get("stages")),
            integer(record.get("problems")),
        )

    def to_record(self) -> JSONObject:
        return {
            "started": self.started,
            "ended": self.ended,
            "seconds": self.seconds,
            "stages": _texts_list(self.stages),
            "problems": self.problems,
        }

    @property
    def text(self) -> str:
        """`2026-01-02T03:04:05Z to 2026-01-02T03:07:00Z (175 s; generate, score; 2 problems)`."""
        return (
            f"{self.started} to {self.ended} ({self.seconds:.0f} s; {', '.join(self.stages)}; "
            f"{self.problems} problem(s))"
        )


@dataclass(frozen=True)
class Groups:
    """The metrics by category, field, subfield (each with its field) and split."""

    by_category: FrozenObject
    by_field: FrozenObject
    by_subfield: FrozenObject
    by_split: FrozenObject

    @classmethod
    def from_record(cls, record: FrozenObject) -> Groups:
        return cls(
            obj(record.get("by_category")),
            obj(record.get("by_field")),
            obj(record.get("by_subfield")),
            obj(record.get("by_split")),
        )

    def to_record(self) -> JSONObject:
        return {
            "by_category": thaw_object(self.by_category),
            "by_field": thaw_object(self.by_field),
            "by_subfield": thaw_object(self.by_subfield),
            "by_split": thaw_object(self.by_split),
        }


@dataclass(frozen=True)
class RateInterval:
    """The 95% interval of a rate, [low, high]."""

    low: float
    high: float

    @classmethod
    def from_record(cls, record: FrozenObject) -> RateInterval | None:
        """The interval of an interval record (`{"low", "high", ...}`); None where it has no ends."""
        low, high = optional_number(record.get("low")), optional_number(record.get("high"))
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
    def from_record(cls, record: FrozenObject) -> GroupMetrics:
        intervals = obj(record.get("intervals"))
        steps = obj(intervals.get("subproblem"))
        return cls(
            total=integer(record.get("Total")),
            evaluated=integer(record.get("Evaluated")),
            errors=integer(record.get("Error")),
            resolved=integer(record.get("main_problem_resolved")),
            steps_passed=integer(record.get("subproblem_correct")),
            steps_scored=integer(record.get("subproblem_total")),
            steps_skipped=integer(record.get("skipped_steps")),
            resolve_interval=RateInterval.from_record(obj(intervals.get("main_problem_resolve_rate"))),
            step_interval=RateInterval.from_record(steps),
            effective_n=optional_number(steps.get("effective_n")),
            interval_steps=integer(steps.get("steps")),
        )


def group_metrics(groups: FrozenObject) -> dict[str, GroupMetrics]:
    """Each group's metrics by name, in recorded order (`Groups`' blocks)."""
    return {name: GroupMetrics.from_record(obj(record)) for name, record in groups.items()}


@dataclass(frozen=True)
class RunSetup:
    """How the run was set up beyond its identity, as summary.md's header states it: the model's endpoint, the tools
    of tool_use, where tool snippets ran, and the recorded settings that shape the scores (those of
    `stages.config.settings.RECORDED_SETTINGS` that config.json records with a value, by name)."""

    base_url: str | None = None  # as config.json records it (no credentials); None where it records none
    tool_names: tuple[str, ...] = ()
    tool_use_max_loops: int = 0
    snippets_ran: str = "unknown"
    settings: FrozenObject = dataclasses.field(default_factory=lambda: EMPTY)
    endpoints: tuple[EndpointUse, ...] = ()  # every endpoint that answered, with its steps (none recorded before)

    @classmethod
    def from_record(cls, record: FrozenObject) -> RunSetup:
        return cls(
            base_url=optional_text(record.get("base_url")),
            tool_names=texts(record.get("tool_names")),
            tool_use_max_loops=integer(record.get("tool_use_max_loops")),
            snippets_ran=text(record.get("snippets_ran")),
            settings=obj(record.get("settings")),
            endpoints=tuple(EndpointUse.from_record(item) for item in objects(record.get("endpoints"))),
        )

    def to_record(self) -> JSONObject:
        record: JSONObject = {
            "base_url": self.base_url,
            "tool_names": _texts_list(self.tool_names),
            "tool_use_max_loops": self.tool_use_max_loops,
            "snippets_ran": self.snippets_ran,
            "settings": thaw_object(self.settings),
        }
        if self.endpoints:
            record["endpoints"] = [use.to_record() for use in self.endpoints]
        return record


@dataclass(frozen=True)
class EnvironmentCount:
    """One grading environment's tally over the scored steps: how many it graded (ran, or its cached verdict was
    read), how many it passed, and the steps that passed in it alone while every other environment failed them."""

    name: str
    graded: int
    passed: int
    only: tuple[str, ...]

    def to_record(self) -> JSONObject:
        return {"name": self.name, "graded": self.graded, "passed": self.passed, "only": list(self.only)}

    @classmethod
    def from_record(cls, record: FrozenObject) -> EnvironmentCount:
        return cls(
            text(record.get("name")),
            integer(record.get("graded")),
            integer(record.get("passed")),
            texts(record.get("only")),
        )


@dataclass(frozen=True)
class EnvironmentsSummary:
    """Under `environments=`: every environment's tally, whether every verdict was recorded (`all_environments`),
    and how many passed steps were decided by one environment without the others running (unknown elsewhere)."""

    every_verdict: bool
    counts: tuple[EnvironmentCount, ...]
    passed_before_the_others: int

    def to_record(self) -> JSONObject:
        return {
            "every_verdict": self.every_verdict,
            "environments": [count.to_record() for count in self.counts],
            "passed_before_the_others": self.passed_before_the_others,
        }

    @classmethod
    def from_record(cls, record: FrozenObject) -> EnvironmentsSummary:
        return cls(
            flag(record.get("every_verdict")),
            tuple(EnvironmentCount.from_record(entry) for entry in objects(record.get("environments"))),
            integer(record.get("passed_before_the_others")),
        )


@dataclass(frozen=True)
class Summary:
    stamp: Stamp
    status: str
    identity: RunIdentity
    run_started: str | None
    summarized_at: str
    targets: SummaryTargets
    attempt_scored: Frozen
    headline: FrozenObject  # HEADLINE_KEYS: the scored attempt's counts, rates and intervals
    uncertainty: Frozen
    inspect_ai_view: Frozen
    groups: Groups
    status_counts: FrozenObject
    problems: tuple[SummaryProblem, ...]
    failed_problems: tuple[FailedProblem, ...]
    usage: Frozen
    latency_s: Frozen
    cost: Frozen
    project: Frozen
    concurrency: Frozen
    tool_use: Frozen
    weak_official_tests: tuple[FrozenObject, ...]
    plots: tuple[str, ...]
    attempts: FrozenObject | None
    confinement: Frozen
    tool_calls: Mapping[str, int]  # outcome -> calls, and `total` (empty in summaries written before)
    steps_without_targets: tuple[str, ...]
    # None in summaries written before these were recorded (and left out of `to_record` then, so such a record
    # reads back as it was); invocations are empty for a run recorded before invocations.jsonl was written
    recorded_caveats: tuple[Caveat, ...] | None = None
    recorded_invocations: tuple[RecordedInvocation, ...] | None = None
    recorded_setup: RunSetup | None = None
    recorded_cached_timeouts: int | None = None  # timeout verdicts of scored steps served from the verdict cache
    recorded_published: PublishedSetting | None = None
    recorded_references: tuple[ReferenceFigure, ...] | None = None
    environments: EnvironmentsSummary | None = None  # under `environments=` only

    @classmethod
    def from_record(cls, record: FrozenObject) -> Summary:
        attempts = record.get("attempts")
        return cls(
            stamp=Stamp.from_record(record),
            status=text(record.get("status")),
            identity=RunIdentity.from_record(record),
            run_started=optional_text(record.get("run_started")),
            summarized_at=text(record.get("summarized_at")),
            targets=SummaryTargets.from_record(obj(record.get("targets"))),
            attempt_scored=record.get("attempt_scored"),
            headline=freeze_headline(record),
            uncertainty=record.get("uncertainty"),
            inspect_ai_view=record.get("inspect_ai_view"),
            groups=Groups.from_record(record),
            status_counts=obj(record.get("status_counts")),
            problems=tuple(SummaryProblem.from_record(problem) for problem in objects(record.get("problems"))),
            failed_problems=tuple(FailedProblem.from_record(entry) for entry in objects(record.get("failed_problems"))),
            usage=record.get("usage"),
            latency_s=record.get("latency_s"),
            cost=record.get("cost"),
            project=record.get("project"),
            concurrency=record.get("concurrency"),
            tool_use=record.get("tool_use"),
            weak_official_tests=_frozen_objects(record.get("weak_official_tests")),
            plots=texts(record.get("plots")),
            attempts=attempts if isinstance(attempts, Mapping) else None,
            confinement=record.get("confinement"),
            tool_calls=MappingProxyType(
                {name: integer(count) for name, count in obj(record.get("tool_calls")).items()}
            ),
            steps_without_targets=texts(record.get("steps_without_targets")),
            recorded_caveats=caveats_of(record["caveats"]) if "caveats" in record else None,
            recorded_invocations=(
                tuple(RecordedInvocation.from_record(entry) for entry in objects(record["invocations"]))
                if "invocations" in record
                else None
            ),
            recorded_setup=RunSetup.from_record(obj(record["setup"])) if "setup" in record else None,
            recorded_cached_timeouts=integer(record["cached_timeouts"]) if "cached_timeouts" in record else None,
            recorded_published=(
                PublishedSetting.from_record(obj(record["published_setting"]))
                if "published_setting" in record
                else None
            ),
            recorded_references=(
                tuple(ReferenceFigure.from_record(entry) for entry in objects(record["references"]))
                if "references" in record
                else None
            ),
            environments=EnvironmentsSummary.from_record(obj(record["environments"]))
            if isinstance(record.get("environments"), Mapping)
            else None,
        )

    def to_record(self) -> JSONObject:
        record: JSONObject = {"fingerprint": self.stamp.fingerprint, "status": self.status}
        record |= self.identity.to_record()
        record |= {
            "run_started": self.run_started,
            "summarized_at": self.summarized_at,
            "targets": self.targets.to_record(),
            "attempt_scored": thaw(self.attempt_scored),
        }
        record |= {key: thaw(self.headline.get(key)) for key in HEADLINE_KEYS}
        record |= {"uncertainty": thaw(self.uncertainty), "inspect_ai_view": thaw(self.inspect_ai_view)}
        record |= self.groups.to_record()
        record |= {
            "status_counts": thaw_object(self.status_counts),
            "problems": [problem.to_record() for problem in self.problems],
            "failed_problems": [entry.to_record() for entry in self.failed_problems],
            "usage": thaw(self.usage),
            "latency_s": thaw(self.latency_s),
            "cost": thaw(self.cost),
            "project": thaw(self.project),
            "concurrency": thaw(self.concurrency),
            "tool_use": thaw(self.tool_use),
            "weak_official_tests": [thaw_object(entry) for entry in self.weak_official_tests],
            "plots": _texts_list(self.plots),
            "attempts": None if self.attempts is None else thaw_object(self.attempts),
            "confinement": thaw(self.confinement),
        }
        if self.stamp.parts is not None:
            record["fingerprint_parts"] = thaw_object(self.stamp.parts)
        tool_calls: JSONObject = dict(self.tool_calls)
        record |= {"tool_calls": tool_calls, "steps_without_targets": _texts_list(self.steps_without_targets)}
        if self.recorded_caveats is not None:
            record["caveats"] = [caveat.to_record() for caveat in self.recorded_caveats]
        if self.recorded_invocations is not None:
            record["invocations"] = [invocation.to_record() for invocation in self.recorded_invocations]
        if self.recorded_setup is not None:
            record["setup"] = self.recorded_setup.to_record()
        if self.recorded_cached_timeouts is not None:
            record["cached_timeouts"] = self.recorded_cached_timeouts
        if self.recorded_published is not None:
            record["published_setting"] = self.recorded_published.to_record()
        if self.recorded_references is not None:
            record["references"] = [reference.to_record() for reference in self.recorded_references]
        if self.environments is not None:
            record["environments"] = self.environments.to_record()
        return record

    @property
    def fingerprint(self) -> str:
        return self.stamp.fingerprint

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
        return GroupMetrics.from_record(self.headline)


def freeze_headline(record: Mapping[str, object]) -> FrozenObject:
    """The headline counts, rates and intervals of a record (keys outside HEADLINE_KEYS left out)."""
    return obj(freeze({key: record.get(key) for key in HEADLINE_KEYS}))


def read_summary_file(path: Path) -> Summary | None:
    """The summary at `path` (parsed once per file version in this process); None when missing or invalid."""
    return read_typed(path, KIND, Summary.from_record)
