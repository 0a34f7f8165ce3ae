"""The registry of doit task kinds and `explain`: why a task will run.

Each stage package declares its own task kind (`stages.<stage>.task`: its action, up-to-date check, artifacts and
explain reasons, shaped by `stages.config.task_kind.TaskKind`); this module lists them by task name: the stages of
a run (`STAGES`), which `doit explain <task>` explains (which named parts changed since a task's artifact was
written), and the tasks run on request (`ON_REQUEST`), never up to date and never a default task.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stages.compare.task import COMPARE
from stages.config.task_kind import ProblemKey, TaskKind
from stages.download.task import DOWNLOAD
from stages.export.task import EXPORT
from stages.generate.task import GENERATE
from stages.preflight.task import PREFLIGHT
from stages.runs.task import RUNS
from stages.score.task import ENVIRONMENTS, SCORE
from stages.select.task import SELECT
from stages.summarize.task import SUMMARIZE
from stages.targets.task import TARGETS

if TYPE_CHECKING:
    from stages.config.settings import Settings

__all__ = [
    "COMPARE",
    "DOWNLOAD",
    "ENVIRONMENTS",
    "EXPORT",
    "GENERATE",
    "ON_REQUEST",
    "PREFLIGHT",
    "RUNS",
    "SCORE",
    "SELECT",
    "STAGES",
    "SUMMARIZE",
    "TARGETS",
    "UnknownTask",
    "explain",
]

STAGES: dict[str, TaskKind] = {
    stage.name: stage for stage in (DOWNLOAD, SELECT, TARGETS, PREFLIGHT, GENERATE, SCORE, SUMMARIZE)
}
ON_REQUEST: dict[str, TaskKind] = {task.name: task for task in (RUNS, EXPORT, COMPARE, ENVIRONMENTS)}


class UnknownTask(ValueError):
    """A task name `explain` cannot explain; one line naming the allowed names."""


def stage_and_key(task: str) -> tuple[TaskKind, ProblemKey]:
    """`score:10` -> (SCORE, ("10",)); `select` -> (SELECT, ())."""
    name, _, problem_id = task.partition(":")
    stage = STAGES.get(name)
    allowed = ", ".join(f"{s.name}:<id>" if s.per_problem else s.name for s in STAGES.values())
    if stage is None or stage.per_problem != bool(problem_id):
        raise UnknownTask(f"cannot explain task {task!r}; allowed: {allowed}")
    return stage, ((problem_id,) if problem_id else ())


def explain(settings: Settings, task: str) -> str:
    """One line: whether `task` is up to date and, if not, which named parts changed since its artifact was written."""
    from stages.benchmark.problems import ProblemDataError

    stage, key = stage_and_key(task)
    try:
        if stage.is_up_to_date(settings, *key):
            return f"{task} is up to date"
        checks = stage.artifacts(settings, *key)
        reasons = [line for check in checks for line in check.reasons(settings, named=len(checks) > 1)]
    except ProblemDataError as error:
        return f"{task} will run: its problem data cannot be read yet ({error})"
    return f"{task} will run: {'; '.join(reasons or stage.other_reasons(settings, *key))}"
