"""A problem whose generation task failed: recorded (`stages.records.failure_records`), so that its problem is scored with
what it has, the others are scored and summarized, and every report names it.

A generation that fails in its own terms (a model call that failed for good) is not this: its step is recorded as
an error in the generation file. This is for a `generate:<id>` task that raised (a file that cannot be read or
written, a bug of ours): `record` writes `<run>/not_generated/<id>.json`; the problem's score task still runs on the
generation file as it is (missing, or an incomplete one: status `error`), the problem is unresolved in every
denominator and is listed as "not generated: <reason>", and the run ends non-zero naming it. The next run generates
it again (its generation is not complete) and `clear` removes the record once that succeeds.

The record names the attempt that failed (the earlier attempts are complete): it concerns the views of more attempts
than that, and a view of fewer attempts reads the problem as its complete generations say
(`read_for_attempts`). While a record concerns the run's attempts, the problem's generate task is not up to date,
so the next run goes through it (asking only what is missing) and clears the record.
"""

from __future__ import annotations

from stages.records.failure_records import FailureRecords, NotGeneratedRecord, ProblemFailure
from stages.storage.paths import RunPaths

ARTIFACT_KIND = "not_generated"
PREFIX = "not generated: "
RECORDS = FailureRecords(ARTIFACT_KIND, PREFIX, RunPaths.not_generated, NotGeneratedRecord)


def record(paths: RunPaths, problem_id: str, error: BaseException, attempt: int) -> ProblemFailure:
    """Record that the generation task of `problem_id` failed because of `error`, in `attempt` (the attempts before
    it are complete)."""
    return RECORDS.record(paths, problem_id, error, attempt)


def clear(paths: RunPaths, problem_id: str) -> None:
    RECORDS.clear(paths, problem_id)


def read(paths: RunPaths, problem_id: str) -> ProblemFailure | None:
    """The problem's record, if its last generation task failed."""
    return RECORDS.read(paths, problem_id)


def read_for_attempts(paths: RunPaths, problem_id: str, attempts: int) -> ProblemFailure | None:
    """The problem's record when it concerns one of attempts 0..attempts-1: a view of fewer attempts than the
    run that failed (`attempts=1` after attempt 2 of `attempts=2` failed) holds only complete ones."""
    failure = read(paths, problem_id)
    return failure if failure is not None and failure.attempt < attempts else None
