"""A problem whose scoring failed: recorded (`stages.records.failure_records`), so that the run goes on and every report
says so.

`record` writes `<run>/not_scored/<id>.json` and removes the problem's stale details file, so the problem has no
details: it is scored again on the next run, and until then `stages.records.results` reads it as `missing_details` with the
reason "not scored: <reason>" (every scored step `no_verdict`, the problem unresolved, in every denominator).
`clear` removes the record before a problem's details are written.
"""

from __future__ import annotations

from pathlib import Path

from stages.records.failure_records import FailureRecords, NotScoredRecord, ProblemFailure
from stages.storage.paths import RunPaths

ARTIFACT_KIND = "not_scored"
PREFIX = "not scored: "
RECORDS = FailureRecords(ARTIFACT_KIND, PREFIX, RunPaths.not_scored, NotScoredRecord)
NotScored = ProblemFailure


def record(paths: RunPaths, problem_id: str, error: BaseException) -> ProblemFailure:
    """Record that `problem_id` could not be scored because of `error`; remove its details file (OSError when the
    record cannot be written: the run folder is unwritable)."""
    _remove_stale(paths.details(problem_id))
    return RECORDS.record(paths, problem_id, error)


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
    RECORDS.clear(paths, problem_id)


def read(paths: RunPaths, problem_id: str) -> ProblemFailure | None:
    """The problem's record, if the last scoring of it failed."""
    return RECORDS.read(paths, problem_id)
