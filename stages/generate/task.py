"""The `generate:<id>` task kind: one problem's generations, current when every attempt's file carries the
current fingerprint; explain names the attempts that ended in error."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING

from doit.exceptions import TaskFailed

from stages.config.command_line import invoked
from stages.config.fingerprints import FingerprintParts, run_relative
from stages.config.task_kind import ArtifactCheck, TaskKind, no_other_reason

if TYPE_CHECKING:
    from stages.config.settings import Settings


def run_generate(settings: Settings, problem_id: str, priority: float = 0.0) -> object:
    """`run_generate_attempts`; a problem whose generation ended in error is counted as failed in the live view.

    Generation never blocks the summary: should the task fail for a reason that is not a stop of the run (an
    unreadable or unwritable file, a bug of ours), the failure is recorded (`stages.records.not_generated`: the problem is
    "not generated: <reason>" in every report, unresolved in every denominator, generated again on the next run)
    and, when this command runs `summarize`, the task succeeds for doit so that the problem's score task and the
    summary still run (the summary's task then fails naming it); otherwise the task fails with that reason. A run
    that stops on purpose stays stopped: a key refused, an interruption, every problem failing the same permanent
    model-level way (`RunAborted`, so that no summary claims 0/N)."""
    from stages.errors import RunStopped
    from stages.execution import live_processes
    from stages.generate.stage import AttemptFailed, RunAborted, run_generate_attempts
    from stages.progress.activity import ACTIVITY
    from stages.records import not_generated

    if not invoked().generation_only:
        warm_up_later_stages(settings)
    not_generated.clear(settings.run_paths, problem_id)
    try:
        outcome = run_generate_attempts(settings, problem_id, priority)
    except (live_processes.RunInterrupted, RunStopped, RunAborted):
        raise  # stops of the run are the run's outcome, not this problem's
    except Exception as error:  # noqa: BLE001 - any other failure of one problem's generation is that problem's
        if live_processes.stopping():
            raise
        failed = error if isinstance(error, AttemptFailed) else AttemptFailed(0, error)
        failure = not_generated.record(settings.run_paths, problem_id, failed.error, failed.attempt)
        ACTIVITY.add_generation_failure(problem_id)
        return None if invoked().runs_summary else TaskFailed(failure.line)
    if "error" in outcome["attempts"]:
        ACTIVITY.add_generation_failure(problem_id)
    return outcome


def warm_up_later_stages(settings: Settings) -> None:
    """While the model answers (scoring and summarizing follow in this process): start the test processes'
    zygote and import the summary's plotting and report modules, in background threads, once per process, so
    neither the first verdict nor the summary waits seconds for imports."""
    if settings.executor == "local":
        from stages.score import start_zygote_in_background

        start_zygote_in_background(settings.python_binary)
    _import_summary_modules_in_background()


@lru_cache(maxsize=1)
def _import_summary_modules_in_background() -> None:
    def import_them() -> None:
        for name in SUMMARY_MODULES:
            importlib.import_module(name)

    threading.Thread(target=import_them, name="summary-imports", daemon=True).start()


SUMMARY_MODULES = ("stages.summarize.plots", "stages.summarize.report")


def generations_are_current(settings: Settings, problem_id: str) -> bool:
    from stages.generate.stage import generations_current

    return generations_current(settings, problem_id)


def generate_artifacts(settings: Settings, problem_id: str) -> list[ArtifactCheck]:
    from stages.generate.stage import generation_fingerprint_parts, generation_path

    def expected(attempt: int) -> Callable[[], FingerprintParts]:
        return lambda: generation_fingerprint_parts(settings, settings.benchmark.problem(problem_id), attempt)

    return [
        ArtifactCheck(generation_path(settings, problem_id, attempt), "generation", expected(attempt))
        for attempt in range(settings.attempts)
    ]


def generate_reasons(settings: Settings, problem_id: str) -> list[str]:
    from stages.execution.untrusted import shown
    from stages.records.generation import read_generation_file

    lines = []
    for check in generate_artifacts(settings, problem_id):
        generation = read_generation_file(check.path)
        status, error = (generation.status, generation.error) if generation else (None, None)
        if status != "complete":
            lines.append(f"{run_relative(settings, check.path)} has status {status}: {shown(error)}")
    return lines or no_other_reason(settings, problem_id)


GENERATE = TaskKind(
    "generate", run_generate, generations_are_current, generate_artifacts, generate_reasons, per_problem=True
)
