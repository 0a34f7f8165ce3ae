"""A scored step's verdict: the record the scoring engine returns, the details files store and the reports read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from stages.statuses import StepStatus


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
    compared: Mapping[str, Any] | None = None

    @property
    def correct(self) -> bool:
        return self.status == "pass"

    def as_record(self) -> dict[str, Any]:
        """The step's entry in a details file."""
        record = {
            "step_id": self.step_id,
            "status": self.status,
            "correct": self.correct,
            "tests": {"total": self.tests_total, "passed": self.tests_passed},
            "returncode": self.returncode,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "duration_s": round(self.duration_s, 3),
            "reason": self.reason,
            "cached": self.cached,
        }
        if self.executed_on:
            record["executed_on"] = self.executed_on
        if self.compared is not None:
            record["compared"] = dict(self.compared)
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> StepVerdict:
        """The verdict of a details file's step entry (where it ran is not read back)."""
        tests = record.get("tests") or {}
        return cls(
            str(record["step_id"]),
            record["status"],
            str(record.get("reason", "")),
            int(tests.get("total", 0)),
            int(tests.get("passed", 0)),
            record.get("returncode"),
            str(record.get("stdout", "")),
            str(record.get("stderr", "")),
            float(record.get("duration_s", 0.0)),
            bool(record.get("cached", False)),
            compared=record["compared"] if isinstance(record.get("compared"), Mapping) else None,
        )

    def to_cache(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_cache(cls, record: dict[str, Any]) -> StepVerdict:
        known = {name: record[name] for name in cls.__dataclass_fields__ if name in record}
        return cls(**{**known, "cached": True})
