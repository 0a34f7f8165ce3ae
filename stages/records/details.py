"""details/<id>.json: the scored task record of one problem, one entry per attempt (its codes, trajectory and
evaluation), and the one definition of a *resolved* problem attempt:

    generation reported no error for the attempt, the problem has scored steps, and every scored step
    of the attempt has a verdict `pass` (prefilled steps, status `skipped`, are not scored).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from stages.records.declared import Declared, key
from stages.records.schema_of import schema_of
from stages.records.stamp import Stamp
from stages.records.usage import Usage
from stages.records.verdict import StepVerdict
from stages.storage.artifacts import read_typed
from stages.storage.json_values import (
    Frozen,
    FrozenObject,
    JSONObject,
    JSONValue,
    freeze,
    freeze_object,
    objects,
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


VERDICT_STATUSES: list[JSONValue] = ["pass", "fail", "timeout", "parse_error", "eval_error", "skipped"]
NON_NEGATIVE: JSONObject = {"minimum": 0}
# A step's entry (`StepVerdict.as_record`, written by hand: its keys are not in the constructor's order).
VERDICT_ENTRY_SCHEMA: JSONObject = {
    "type": "object",
    "required": ["step_id", "status", "correct", "tests", "returncode", "stdout", "stderr", "duration_s", "reason"],
    "properties": {
        "step_id": {"type": "string"},
        "status": {"enum": VERDICT_STATUSES},
        "correct": {"type": "boolean"},
        "tests": {
            "type": "object",
            "required": ["total", "passed"],
            "properties": {"total": {"type": "integer"}, "passed": {"type": "integer"}},
        },
        "returncode": {"type": ["integer", "null"]},
        "stdout": {"type": "string"},
        "stderr": {"type": "string"},
        "duration_s": {"type": "number", "minimum": 0},
        "reason": {"type": "string"},
        "cached": {"type": "boolean"},
        "environments": {
            "type": "array",
            "description": "under environments=: each grading environment's verdict, in the order named, for those "
            "that ran or whose verdict the cache held; the step passes when any passed",
            "items": {
                "type": "object",
                "required": ["name", "status", "reason"],
                "properties": {
                    "name": {"type": "string"},
                    "status": {"enum": VERDICT_STATUSES},
                    "reason": {"type": "string"},
                    "cached": {"type": "boolean"},
                    "duration_s": {"type": "number", "minimum": 0},
                },
            },
        },
        "compared": {
            "type": "object",
            "required": ["test", "values"],
            "description": "a fail decided by a failed check: its statement and the captured (model-side) values it "
            "compared, each described (type, repr, and for numbers shape, dtype, size, first elements) with the "
            "target part it was compared with (subscripts; never a target value)",
            "properties": {
                "test": {"type": "integer", "minimum": 0},
                "statement": {"type": "string"},
                "uses_target": {"type": "boolean"},
                "values": {"type": "array", "items": {"type": "object", "required": ["name", "description"]}},
            },
        },
    },
}
STEP_CODES: JSONObject = {"type": "object"}


def _verdict(step: FrozenObject) -> StepVerdict:
    """A step entry's verdict; its compared values as plain JSON (as the report reads them)."""
    verdict = StepVerdict.from_record({**step, "compared": None})
    compared = step.get("compared")
    return dataclasses.replace(
        verdict,
        executed_on=text(step.get("executed_on")),
        compared=thaw_object(compared) if isinstance(compared, Mapping) else None,
    )


def _verdicts(value: Frozen) -> tuple[StepVerdict, ...]:
    return tuple(_verdict(step) for step in objects(value))


def _verdict_entries(verdicts: tuple[StepVerdict, ...]) -> JSONValue:
    return [thaw(freeze(verdict.as_record())) for verdict in verdicts]


@dataclass(frozen=True)
class TargetsUsed(Declared):
    """The targets an attempt was scored against: their kind (official, explicit, derived), sha256 and note."""

    kind: str
    sha256: str | None
    note: str | None


@dataclass(frozen=True)
class Evaluation(Declared):
    """An attempt's evaluation: its verdicts and totals; `targets` None in files written before it was kept."""

    problem_id: str
    problem_correct: bool
    total_correct: int = field(metadata=key(schema=NON_NEGATIVE))
    total_steps: int = field(metadata=key(schema=NON_NEGATIVE))
    subproblem_correctness: tuple[bool, ...]
    steps: tuple[StepVerdict, ...] = field(
        metadata=key(read=_verdicts, write=_verdict_entries, schema={"type": "array", "items": VERDICT_ENTRY_SCHEMA})
    )
    error: str | None
    # the hand-written schema left it open: its keys stay optional for files written before it was typed
    targets: TargetsUsed | None = field(default=None, metadata=key(omit="if_none", schema={"required": []}))

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
            TargetsUsed.from_record(freeze_object(targets)),
        )


@dataclass(frozen=True, kw_only=True)
class ScoredAttempt(Declared):
    """One attempt of a details file: its codes, trajectory, evaluation and the cost its meta reports
    (`usage_record`, `latency_s`: None when the meta has none; `tool_outcomes` None in older files).
    `index` and `record_failed` are given by the details record: the attempt's place, and whether the
    record-level status says generation failed and this is the only attempt."""

    index: int = field(default=0, metadata=key(outside=True))
    final_codes: FrozenObject = field(metadata=key("step_codes", within="final_answer"))
    artifact_codes: FrozenObject = field(metadata=key("step_codes", within="artifacts"))
    trajectory: tuple[FrozenObject, ...] = field(metadata=key(schema={"items": {}}))  # any items, as before
    correct: bool
    score: float = field(metadata=key(schema={"minimum": 0, "maximum": 1}))
    evaluation: Evaluation = field(metadata=key(within="meta"))
    tool_outcomes: FrozenObject | None = field(
        default=None,
        metadata=key(
            within="meta",
            omit="if_none",
            schema={
                "description": "code_interpreter calls by outcome: total and per step",
                "properties": {"total": {"type": "object"}, "steps": {"type": "object"}},
            },
        ),
    )
    usage_record: FrozenObject | None = field(default=None, metadata=key("usage", within="meta", omit="if_none"))
    latency_s: float | None = field(default=None, metadata=key(within="meta", omit="if_none"))
    record_failed: bool = field(default=False, metadata=key(outside=True))

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


def _stamp_or_none(stamp: Stamp | None) -> JSONValue:
    """Details built in memory carry no stamp; written, they would carry an empty fingerprint."""
    return (stamp or Stamp("")).to_record()


@dataclass(frozen=True, kw_only=True)
class Details(Declared):
    record_schema = {"title": "details: the scored task record of one problem"}

    # None only for details built in memory, never written
    stamp: Stamp | None = field(default=None, metadata=key(flatten=True, write=_stamp_or_none, schema=schema_of(Stamp)))
    status: str = field(metadata=key(schema={"enum": list(get_args(DetailsStatus))}))
    task_id: str = "?"  # "?" in a record that lacks it
    category: str
    attempts: tuple[ScoredAttempt, ...] = field(metadata=key(schema={"minItems": 1}))

    # A real special case: an attempt's place and the record-level failure are the record's, not the attempt's.
    @classmethod
    def from_record(cls, record: FrozenObject) -> Details:
        details = super().from_record(record)
        single_failed = len(details.attempts) == 1 and details.status in GENERATION_FAILED_STATES
        attempts = tuple(
            dataclasses.replace(attempt, index=index, record_failed=single_failed)
            for index, attempt in enumerate(details.attempts)
        )
        return dataclasses.replace(details, attempts=attempts)

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
