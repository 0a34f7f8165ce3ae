"""The `score:<id>` task kind: one problem's details, current when they carry the current score fingerprint
(and no `rescore=` asks for them again)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from doit.exceptions import TaskFailed

from stages.config.command_line import invoked
from stages.config.task_kind import ArtifactCheck, TaskKind, never_up_to_date, run_whenever_named

if TYPE_CHECKING:
    from stages.config.settings import Settings
    from stages.records.details import Details
    from stages.score.parent.stage import ScoreSummary


def score_and_count(settings: Settings, problem_id: str) -> ScoreSummary | TaskFailed | None:
    """`run_score`, its attempt-0 step counts published to the live view.

    One problem never takes the others down: should scoring fail for any reason (a bug included), the failure
    is recorded (`stages.records.not_scored`: the problem is "not scored: <reason>" in every report, unresolved in
    every denominator, and scored again on the next run). When this command runs `summarize`, the task then
    succeeds for doit, which runs no task whose dependency failed: the reporter still shows it as failed (it
    reads the failure from the live view's activity), and the summary's task fails naming it. Otherwise the
    task fails with that reason."""
    from stages.execution import live_processes
    from stages.progress.activity import ACTIVITY
    from stages.records import not_scored
    from stages.score.parent.stage import run_score

    try:
        outcome = run_score(settings, problem_id)
    except live_processes.RunInterrupted:
        raise
    except Exception as error:  # noqa: BLE001 - any failure of one problem's scoring is that problem's outcome
        if live_processes.stopping():
            raise
        failure = not_scored.record(settings.run_paths, problem_id, error)
        ACTIVITY.add_not_scored(problem_id, failure.line, failure.detail)
        return None if invoked().runs_summary else TaskFailed(failure.line)
    ACTIVITY.add_scored(problem_id, outcome["passed"], outcome["scored"])
    return outcome


def score_is_current(settings: Settings, problem_id: str) -> bool:
    """Whether `details/<id>.json` carries the current score fingerprint (nothing published)."""
    from stages.score.parent.stage import score_fingerprint
    from stages.storage.artifacts import is_current

    return is_current(settings.run_paths.details(problem_id), "details", score_fingerprint(settings, problem_id))


def rescore_wanted(rescore: str, details: Details) -> bool:
    """`rescore=true`: every problem is scored again; `rescore=timeouts`: the problems with a timeout verdict."""
    if rescore == "true":
        return True
    return rescore == "timeouts" and details.has_status("timeout")


def details_current(settings: Settings, problem_id: str) -> bool:
    """Whether `details/<id>.json` is up to date; an up-to-date problem's step counts go to the live view."""
    from stages.progress.activity import ACTIVITY
    from stages.records.details import current_details
    from stages.score.parent.stage import score_fingerprint

    details = current_details(settings.run_paths.details(problem_id), score_fingerprint(settings, problem_id))
    if details is None or rescore_wanted(settings.rescore, details):
        return False
    evaluation = details.attempts[0].evaluation
    ACTIVITY.add_scored(problem_id, evaluation.total_correct, evaluation.total_steps)
    return True


def score_artifacts(settings: Settings, problem_id: str) -> list[ArtifactCheck]:
    from stages.score.parent.stage import score_fingerprint_parts

    return [
        ArtifactCheck(
            settings.run_paths.details(problem_id), "details", lambda: score_fingerprint_parts(settings, problem_id)
        )
    ]


SCORE = TaskKind("score", score_and_count, details_current, score_artifacts, per_problem=True)


def build_environments(settings: Settings) -> None:
    """`doit environments`: build the protocol's grading environments and print the `environments=` value."""
    from stages.score.parent.environments import build_for_settings

    build_for_settings(settings)


ENVIRONMENTS = TaskKind("environments", build_environments, never_up_to_date, other_reasons=run_whenever_named)
