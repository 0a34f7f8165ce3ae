"""A problem whose scoring failed: recorded, so that the run goes on and every report says so.

One problem never takes the others down. When `score:<id>` fails for any reason (a bad generation file, a full
disk, a bug of ours), `record` writes `<run>/not_scored/<id>.json` (`not_scored.schema.json`: the reason in one
line and, for an unexpected error, its traceback) and removes the problem's stale details file, so the
problem has no details: it is scored again on the next run, and until then `stages.results` reads it as
`missing_details` with the reason "not scored: <reason>" (every scored step `no_verdict`, the problem
unresolved, in every denominator). `clear` removes the record before a problem's details are written (in that
order: a crash between the two leaves neither, never a stale record beside current details).
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from stages.artifacts import read_artifact, write_artifact
from stages.errors import PipelineError
from stages.paths import RunPaths
from stages.untrusted import shown, valid_text

ARTIFACT_KIND = "not_scored"
PREFIX = "not scored: "


@dataclass(frozen=True)
class NotScored:
    problem_id: str
    reason: str  # one line, neutralised
    detail: str | None  # the traceback of an unexpected error

    @property
    def line(self) -> str:
        """`not scored: <reason>`: what the summary, the report and the terminal say."""
        return PREFIX + self.reason


def _reason_of(error: BaseException) -> str:
    return shown(f"{type(error).__name__}: {error}" if str(error) else type(error).__name__, limit=500)


def record(paths: RunPaths, problem_id: str, error: BaseException) -> NotScored:
    """Record that `problem_id` could not be scored because of `error`; remove its details file (OSError when the
    record cannot be written: the run folder is unwritable)."""
    detail = None if isinstance(error, PipelineError) else valid_text("".join(traceback.format_exception(error)))
    failure = NotScored(problem_id, _reason_of(error), detail)
    _remove_stale(paths.details(problem_id))
    write_artifact(
        paths.not_scored(problem_id),
        ARTIFACT_KIND,
        {
            "status": "not_scored",
            "problem_id": problem_id,
            "reason": failure.reason,
            "detail": detail,
            "recorded_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    )
    return failure


def _remove_stale(path: Path) -> None:
    """Remove the details file the failed scoring would have replaced (anything but a regular file there, e.g. a
    folder, is left for the user: the reader does not take it for details)."""
    try:
        if path.is_file() or path.is_symlink():
            path.unlink()
    except FileNotFoundError:
        pass


def clear(paths: RunPaths, problem_id: str) -> None:
    """Remove the problem's record (before its details are written)."""
    try:
        paths.not_scored(problem_id).unlink()
    except FileNotFoundError:
        pass


def read(paths: RunPaths, problem_id: str) -> NotScored | None:
    """The problem's record, if the last scoring of it failed."""
    found = read_artifact(paths.not_scored(problem_id), ARTIFACT_KIND)
    if found is None or found["problem_id"] != problem_id:
        return None
    return NotScored(problem_id, shown(found["reason"], limit=500), found["detail"])
