"""The record of a problem whose task failed, so that the run goes on and every report says so.

One problem never takes the others down. When `generate:<id>` or `score:<id>` fails for any reason (a bad file, a
full disk, a bug of ours), its stage writes a `FailureRecords` file for the problem
(`<run>/not_generated/<id>.json`, `<run>/not_scored/<id>.json`; schemas of the same names): the reason in one line,
neutralised, and for an unexpected error its traceback. The problem then counts in every denominator as unresolved
and is named with the record's `line`; the record is removed when the problem's task next succeeds (the stages
`clear` it before writing their artifact: a crash between the two leaves neither, never a stale record beside a
current artifact).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from stages.errors import PipelineError
from stages.execution.untrusted import shown, valid_text
from stages.records.declared import Declared, key
from stages.storage.artifacts import read_frozen, write_artifact
from stages.storage.json_values import optional_text, text
from stages.storage.paths import RunPaths

REASON_LIMIT = 500


@dataclass(frozen=True)
class ProblemFailure:
    problem_id: str
    reason: str  # one line, neutralised
    detail: str | None  # the traceback of an unexpected error
    prefix: str  # what the failed stage is called in reports: "not scored: ", "not generated: "
    attempt: int = 0  # the first attempt the failure concerns (the earlier ones are complete): 0 for every attempt

    @property
    def line(self) -> str:
        """`<prefix><reason>` (`<prefix>attempt <n>: <reason>` for a later attempt, numbered from 1): what the
        summary, the report and the terminal say."""
        return self.prefix + (f"attempt {self.attempt + 1}: " if self.attempt else "") + self.reason


@dataclass(frozen=True, kw_only=True)
class FailureRecord(Declared):
    """The file a failure record is: `status` is its stage's kind."""

    record_schema = {"additionalProperties": False}

    status: str
    problem_id: str
    reason: str = field(metadata=key(schema={"description": "one line: the error's class and message"}))
    detail: str | None = field(
        metadata=key(
            schema={
                "description": "the traceback of an unexpected error (null for the pipeline's own errors)",
            }
        )
    )
    recorded_at: str = field(metadata=key(schema={"description": "UTC, ISO 8601"}))


@dataclass(frozen=True, kw_only=True)
class NotScoredRecord(FailureRecord):
    record_schema = {
        "title": "not_scored: why one problem could not be scored in the last run (stages/records/failure_records.py); removed "
        "when it is scored",
        "additionalProperties": False,
        "properties": {"status": {"const": "not_scored"}},
    }


@dataclass(frozen=True, kw_only=True)
class NotGeneratedRecord(FailureRecord):
    record_schema = {
        "title": "not_generated: why the generation task of one problem failed in the last run "
        "(stages/records/failure_records.py); removed when it succeeds",
        "additionalProperties": False,
        "properties": {"status": {"const": "not_generated"}},
    }

    attempt: int | None = field(
        default=None,
        metadata=key(
            omit="if_none",
            schema={
                "minimum": 0,
                "description": "the attempt (0-based) whose generation failed; the earlier ones are complete (absent "
                "in records written before attempts were recorded: every attempt)",
            },
        ),
    )


def reason_of(error: BaseException) -> str:
    """The pipeline's own error by its message (its class is internal); any other (a bug) by class and message."""
    if isinstance(error, PipelineError) and str(error):
        return shown(str(error), limit=REASON_LIMIT)
    return shown(f"{type(error).__name__}: {error}" if str(error) else type(error).__name__, limit=REASON_LIMIT)


@dataclass(frozen=True)
class FailureRecords:
    """The failure records of one stage: their artifact kind (also their status), the prefix of their line,
    where a problem's record is, and the record a file holds."""

    kind: str
    prefix: str
    path_of: Callable[[RunPaths, str], Path]
    record_type: type[FailureRecord]

    def record(
        self, paths: RunPaths, problem_id: str, error: BaseException, attempt: int | None = None
    ) -> ProblemFailure:
        """Record that the problem's task failed because of `error` (OSError when the run folder cannot be
        written); `attempt`, where the stage has attempts, the first one the failure concerns."""
        detail = None if isinstance(error, PipelineError) else valid_text("".join(traceback.format_exception(error)))
        failure = ProblemFailure(problem_id, reason_of(error), detail, self.prefix, attempt or 0)
        recorded_at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        stated = {"status": self.kind, "problem_id": problem_id, "reason": failure.reason, "detail": detail}
        attempts = {} if attempt is None else {"attempt": attempt}
        record = self.record_type(**stated, recorded_at=recorded_at, **attempts)  # type: ignore[arg-type]
        write_artifact(self.path_of(paths, problem_id), self.kind, record.to_record())
        return failure

    def clear(self, paths: RunPaths, problem_id: str) -> None:
        """Remove the problem's record (before the stage writes its artifact)."""
        self.path_of(paths, problem_id).unlink(missing_ok=True)

    def read(self, paths: RunPaths, problem_id: str) -> ProblemFailure | None:
        """The problem's record, if its last task of this stage failed."""
        found = read_frozen(self.path_of(paths, problem_id), self.kind)
        if found is None or found.get("problem_id") != problem_id:
            return None
        reason = shown(text(found.get("reason")), limit=REASON_LIMIT)
        attempt = found.get("attempt")
        first = attempt if isinstance(attempt, int) and not isinstance(attempt, bool) and attempt >= 0 else 0
        return ProblemFailure(problem_id, reason, optional_text(found.get("detail")), self.prefix, first)
