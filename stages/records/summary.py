"""summary.json: the run's metrics and problem rows under the names of the results contract.

`Summary` names the fields the pipeline itself reads back (whether the summary is current, which plots it
lists, which problems failed, the tool-call outcomes, the steps without targets, each problem's step
statuses) and holds the whole record as written (`fields`), which `to_record` gives back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from stages.artifacts import read_typed
from stages.records.json_values import FrozenObject, JSONObject, integer, obj, objects, text, texts, thaw_object
from stages.records.stamp import Stamp

KIND = "summary"


@dataclass(frozen=True)
class FailedProblem:
    problem_id: str
    reason: str


@dataclass(frozen=True)
class SummaryStep:
    step_id: str
    status: str


@dataclass(frozen=True)
class SummaryProblem:
    problem_id: str
    steps: tuple[SummaryStep, ...]

    @property
    def step_ids(self) -> frozenset[str]:
        return frozenset(step.step_id for step in self.steps)


@dataclass(frozen=True)
class Summary:
    stamp: Stamp
    status: str
    plots: tuple[str, ...]
    failed_problems: tuple[FailedProblem, ...]
    problems: tuple[SummaryProblem, ...]
    tool_calls: Mapping[str, int]  # outcome -> calls, and `total` (empty in summaries written before)
    steps_without_targets: tuple[str, ...]
    fields: FrozenObject  # the whole record, as written

    @classmethod
    def from_record(cls, record: FrozenObject) -> Summary:
        return cls(
            Stamp.from_record(record),
            text(record.get("status")),
            texts(record.get("plots")),
            tuple(
                FailedProblem(text(entry.get("problem_id")), text(entry.get("reason")))
                for entry in objects(record.get("failed_problems"))
            ),
            tuple(
                SummaryProblem(
                    text(problem.get("problem_id")),
                    tuple(
                        SummaryStep(text(step.get("step_id")), text(step.get("status")))
                        for step in objects(problem.get("steps"))
                    ),
                )
                for problem in objects(record.get("problems"))
            ),
            {name: integer(count) for name, count in obj(record.get("tool_calls")).items()},
            texts(record.get("steps_without_targets")),
            record,
        )

    def to_record(self) -> JSONObject:
        return thaw_object(self.fields)

    @property
    def fingerprint(self) -> str:
        return self.stamp.fingerprint


def read_summary_file(path: Path) -> Summary | None:
    """The summary at `path` (parsed once per file version in this process); None when missing or invalid."""
    return read_typed(path, KIND, Summary.from_record)
