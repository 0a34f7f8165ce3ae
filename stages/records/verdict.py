"""A scored step's verdict: the record the scoring engine returns, the details files store and the reports read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from stages.records.declared import Declared, key, one_of
from stages.statuses import STEP_STATUSES, StepStatus
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
    thaw_object,
)


def _step_duration(seconds: float) -> float:
    """A test process's duration as the records write it: to the millisecond."""
    return round(seconds, 3)


_step_status = one_of(STEP_STATUSES, "eval_error")  # the schema allows only these; anything else: an eval error


@dataclass(frozen=True)
class EnvironmentVerdict(Declared):
    """What one grading environment (`environments=`) decided of a step: its status and reason, whether the
    verdict cache held it, and how long its test process ran."""

    name: str
    status: StepStatus = field(metadata=key(read=_step_status))
    reason: str
    cached: bool = False
    duration_s: float = field(default=0.0, metadata=key(write=_step_duration))

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @classmethod
    def of(cls, name: str, verdict: StepVerdict) -> EnvironmentVerdict:
        return cls(name, verdict.status, verdict.reason, verdict.cached, verdict.duration_s)


@dataclass(frozen=True)
class StepVerdict:
    """One step's verdict, with the test process's bounded output."""

    step_id: str
    status: StepStatus
    reason: str
    tests_total: int = 0
    tests_passed: int = 0
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    cached: bool = False
    launch_mode: str = ""
    executed_on: str = ""  # the dask worker that ran the test process ("" when run by this process)
    # A `fail` decided by a failed check: what its statement compared, model-side values only (the checker's
    # `compared_values`); the report adds the target side. Never a target value.
    compared: JSONObject | None = None
    # Under `environments=`: each environment's verdict, in the order they are named, for those that ran or whose
    # verdict the cache held (a step passes when any passed; the first pass ends it unless `all_environments`).
    environments: tuple[EnvironmentVerdict, ...] = ()

    @property
    def correct(self) -> bool:
        return self.status == "pass"

    # A real special case: the entry's keys are not in the constructor's order (the reason follows the test
    # output), `correct` is derived and where it ran is written but not read back.
    def as_record(self) -> JSONObject:
        """The step's entry in a details file."""
        record: JSONObject = {
            "step_id": self.step_id,
            "status": self.status,
            "correct": self.correct,
            "tests": {"total": self.tests_total, "passed": self.tests_passed},
            "returncode": self.returncode,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "duration_s": _step_duration(self.duration_s),
            "reason": self.reason,
            "cached": self.cached,
        }
        if self.executed_on:
            record["executed_on"] = self.executed_on
        if self.compared is not None:
            record["compared"] = dict(self.compared)
        if self.environments:
            verdicts: list[JSONValue] = [environment.to_record() for environment in self.environments]
            record["environments"] = verdicts
        return record

    @classmethod
    def from_record(cls, record: FrozenObject) -> StepVerdict:
        """The verdict of a details file's step entry (where it ran is not read back)."""
        tests = obj(record.get("tests"))
        compared = record.get("compared")
        return cls(
            text(record.get("step_id")),
            _step_status(record.get("status")),
            text(record.get("reason")),
            integer(tests.get("total")),
            integer(tests.get("passed")),
            _returncode(record.get("returncode")),
            text(record.get("stdout")),
            text(record.get("stderr")),
            number(record.get("duration_s")),
            bool(record.get("cached", False)),
            compared=thaw_object(compared) if isinstance(compared, Mapping) else None,
            environments=tuple(EnvironmentVerdict.from_record(item) for item in objects(record.get("environments"))),
        )

    def to_cache(self) -> JSONObject:
        return asdict(self)

    @classmethod
    def from_cache(cls, record: dict[str, Any]) -> StepVerdict:
        """The verdict a cache file holds (`to_cache`, parsed JSON): TypeError when its fields do not fit."""
        # One environment's verdict: what several environments decided is never cached as one.
        known = {name: record[name] for name in cls.__dataclass_fields__ if name in record and name != "environments"}
        return cls(**{**known, "cached": True})


def _returncode(value: Frozen) -> int | None:
    return None if value is None else integer(value)
