"""details/<id>.json: the scored task record of one problem, one entry per attempt (its codes, trajectory and
evaluation), and the one definition of a *resolved* problem attempt:

    generation reported no error for the attempt, the problem has scored steps, and every scored step
    of the attempt has a verdict `pass` (prefilled steps, status `skipped`, are not scored).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from stages.records.stamp import Stamp
from stages.records.usage import Usage
from stages.records.verdict import StepVerdict
from stages.storage.artifacts import read_typed
from stages.storage.json_values import (
    FrozenObject,
    JSONObject,
    JSONValue,
    flag,
    freeze,
    integer,
    items,
    number,
    obj,
    objects,
    optional_number,
    optional_text,
    text,
    thaw,
    thaw_object,
)

KIND = "details"
DetailsStatus = Literal["complete", "generation_error", "missing_generation"]
GENERATION_FAILED_STATES: frozenset[str] = frozenset({"generation_error", "missing_generation"})


def is_resolved(statuses: Iterable[str], scored_steps: int, generation_ok: bool) -> bool:
    """THE definition of a resolved problem attempt (see the module docstring)."""
    scored = [status for status in statuses if status != "skipped"]
    passed = sum(status == "pass" for status in scored)
    return generation_ok and scored_steps > 0 and passed >= scored_steps and passed == len(scored)


def _verdict(step: FrozenObject) -> StepVerdict:
    """A step entry's verdict; its compared values as plain JSON (as the report reads them)."""
    verdict = StepVerdict.from_record({**step, "compared": None})
    compared = step.get("compared")
    return dataclasses.replace(
        verdict,
        executed_on=text(step.get("executed_on")),
        compared=thaw_object(compared) if isinstance(compared, Mapping) else None,
    )


@dataclass(frozen=True)
class Evaluation:
    """An attempt's evaluation: its verdicts and totals; `targets` None in files written before it was kept."""

    problem_id: str
    problem_correct: bool
    total_correct: int
    total_steps: int
    subproblem_correctness: tuple[bool, ...]
    steps: tuple[StepVerdict, ...]
    error: str | None
    targets: FrozenObject | None = None

    @classmethod
    def of(cls, problem_id: str, verdicts: Iterable[StepVerdict], error: str | None, targets: JSONObject) -> Evaluation:
        """The evaluation of an attempt's verdicts (the totals count the scored steps)."""
        steps = tuple(verdicts)
        scored = [verdict for verdict in steps if verdict.status != "skipped"]
        total_correct = sum(verdict.correct for verdict in scored)
        return cls(
            problem_id,
            bool(scored) and total_correct == len(scored),
            total_correct,
            len(scored),
            tuple(verdict.correct for verdict in scored),
            steps,
            error,
            _frozen_object(targets),
        )

    @classmethod
    def from_record(cls, record: FrozenObject) -> Evaluation:
        targets = record.get("targets")
        return cls(
            text(record.get("problem_id")),
            flag(record.get("problem_correct")),
            integer(record.get("total_correct")),
            integer(record.get("total_steps")),
            tuple(flag(value) for value in items(record.get("subproblem_correctness"))),
            tuple(_verdict(step) for step in objects(record.get("steps"))),
            optional_text(record.get("error")),
            targets if isinstance(targets, Mapping) else None,
        )

    def to_record(self) -> JSONObject:
        steps: list[JSONValue] = [thaw(freeze(verdict.as_record())) for verdict in self.steps]
        correctness: list[JSONValue] = list(self.subproblem_correctness)
        record: JSONObject = {
            "problem_id": self.problem_id,
            "problem_correct": self.problem_correct,
            "total_correct": self.total_correct,
            "total_steps": self.total_steps,
            "subproblem_correctness": correctness,
            "steps": steps,
            "error": self.error,
        }
        if self.targets is not None:
            record["targets"] = thaw_object(self.targets)
        return record


@dataclass(frozen=True)
class ScoredAttempt:
    """One attempt of a details file: its codes, trajectory, evaluation and the cost its meta reports
    (`usage_record`, `latency_s`: None when the meta has none; `tool_outcomes` None in older files).
    `record_failed`: the record-level status says generation failed and this is the only attempt."""

    index: int
    final_codes: FrozenObject
    artifact_codes: FrozenObject
    trajectory: tuple[FrozenObject, ...]
    correct: bool
    score: float
    evaluation: Evaluation
    tool_outcomes: FrozenObject | None = None
    usage_record: FrozenObject | None = None
    latency_s: float | None = None
    record_failed: bool = False

    @classmethod
    def from_record(cls, index: int, record: FrozenObject, record_failed: bool = False) -> ScoredAttempt:
        meta = obj(record.get("meta"))
        outcomes, usage = meta.get("tool_outcomes"), meta.get("usage")
        return cls(
            index,
            obj(obj(record.get("final_answer")).get("step_codes")),
            obj(obj(record.get("artifacts")).get("step_codes")),
            objects(record.get("trajectory")),
            flag(record.get("correct")),
            number(record.get("score")),
            Evaluation.from_record(obj(meta.get("evaluation"))),
            outcomes if isinstance(outcomes, Mapping) else None,
            usage if isinstance(usage, Mapping) else None,
            optional_number(meta.get("latency_s")),
            record_failed,
        )

    def to_record(self) -> JSONObject:
        meta: JSONObject = {"evaluation": self.evaluation.to_record()}
        if self.tool_outcomes is not None:
            meta["tool_outcomes"] = thaw_object(self.tool_outcomes)
        if self.usage_record is not None:
            meta["usage"] = thaw_object(self.usage_record)
        if self.latency_s is not None:
            meta["latency_s"] = self.latency_s
        trajectory: list[JSONValue] = [thaw_object(step) for step in self.trajectory]
        return {
            "final_answer": {"step_codes": thaw_object(self.final_codes)},
            "artifacts": {"step_codes": thaw_object(self.artifact_codes)},
            "trajectory": trajectory,
            "correct": self.correct,
            "score": self.score,
            "meta": meta,
        }

    @property
    def verdicts(self) -> tuple[StepVerdict, ...]:
        return self.evaluation.steps

    @property
    def evaluation_error(self) -> str | None:
        return self.evaluation.error

    @property
    def declared_total_steps(self) -> int:
        """The evaluation's own `total_steps`."""
        return self.evaluation.total_steps

    @property
    def step_codes(self) -> Mapping[str, str]:
        return {step_id: code for step_id, code in self.final_codes.items() if isinstance(code, str)}

    @property
    def usage(self) -> Usage | None:
        return None if self.usage_record is None else Usage.from_record(thaw_object(self.usage_record))

    @property
    def generation_ok(self) -> bool:
        return self.evaluation_error is None and not self.record_failed

    def resolved(self, scored_steps: int) -> bool:
        return is_resolved((verdict.status for verdict in self.verdicts), scored_steps, self.generation_ok)

    @property
    def passed_steps(self) -> frozenset[str]:
        return frozenset(v.step_id for v in self.verdicts if v.status == "pass")

    @property
    def scored_verdicts(self) -> tuple[StepVerdict, ...]:
        return tuple(v for v in self.verdicts if v.status != "skipped")

    def verdict(self, step_id: str) -> StepVerdict | None:
        return next((v for v in self.verdicts if v.step_id == step_id), None)


@dataclass(frozen=True)
class Details:
    task_id: str
    status: str
    category: str
    attempts: tuple[ScoredAttempt, ...]
    stamp: Stamp | None = None  # None only for details built in memory, never written

    @classmethod
    def from_record(cls, record: FrozenObject) -> Details:
        attempts = objects(record.get("attempts"))
        status = text(record.get("status"))
        single_failed = len(attempts) == 1 and status in GENERATION_FAILED_STATES
        return cls(
            text(record.get("task_id"), "?"),
            status,
            text(record.get("category")),
            tuple(ScoredAttempt.from_record(index, attempt, single_failed) for index, attempt in enumerate(attempts)),
            Stamp.from_record(record),
        )

    def to_record(self) -> JSONObject:
        attempts: list[JSONValue] = [attempt.to_record() for attempt in self.attempts]
        return (self.stamp or Stamp("")).to_record() | {
            "status": self.status,
            "task_id": self.task_id,
            "category": self.category,
            "attempts": attempts,
        }

    @property
    def fingerprint(self) -> str:
        return self.stamp.fingerprint if self.stamp else ""

    def has_status(self, status: str) -> bool:
        """Whether any attempt has a verdict `status`."""
        return any(verdict.status == status for attempt in self.attempts for verdict in attempt.verdicts)


def read_details_file(path: Path) -> Details | None:
    """The details at `path` (parsed once per file version in this process); None when missing or invalid."""
    return read_typed(path, KIND, Details.from_record)


def current_details(path: Path, expected_fingerprint: str) -> Details | None:
    """The details at `path` when they are valid and carry the expected fingerprint."""
    details = read_details_file(path)
    return details if details is not None and details.fingerprint == expected_fingerprint else None


def _frozen_object(value: JSONObject) -> FrozenObject:
    frozen = freeze(value)
    return frozen if isinstance(frozen, Mapping) else {}
