"""Glue between doit and the stages: settings from the command line, clean one-line failures, task order.

The actions and up-to-date checks themselves are the `TaskKind` records of each stage's `task` module, listed in
`stages/pipeline/tasks.py`; what a command line asks for is `stages/config/command_line.py` (parsed once); doit's
`name=value` words come through `stages/pipeline/doit_adapter.py`; Ctrl-C and SIGTERM are `stages/pipeline/interrupts.py`. Kept out of `dodo.py` so
that file reads as the task graph alone.
"""

from __future__ import annotations

import atexit
import errno
import gc
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from doit.exceptions import TaskFailed

from stages.config.command_line import invoked
from stages.config.settings import ConfigError, Settings, load_settings
from stages.errors import PipelineError, RunStopped
from stages.execution import live_processes
from stages.execution.confinement import ConfinementUnavailable, check_confinement
from stages.execution.scheduling import ExpectedWork, generation_order
from stages.execution.untrusted import shown
from stages.exit_codes import CONFIG_ERROR, RUN_LOCKED, UNWRITABLE
from stages.pipeline.doit_adapter import command_line_variables
from stages.pipeline.interrupts import exit_now, on_exit_now


def exit_without_final_collection() -> None:
    """At exit, after the exit handlers registered later (zygotes, the built-in endpoint, the run lock): freeze
    the garbage collector, so the interpreter's teardown does not walk every object of the model client, plotting
    and scoring libraries (most of a second on a 2-core machine, for every doit command). Everything the run
    writes is closed explicitly before: artifacts by atomic replace, doit's database by doit, the standard
    streams by the interpreter."""
    atexit.register(gc.freeze)


def settings_or_exit() -> Settings:
    """Settings from doit's `name=value` words; a bad configuration stops doit with one line, before any work.

    For a command that runs tasks, also the checks the data already allows (replay file, category, sample_ids)
    and the run folder's lock: a second run on the same folder stops here with one line naming the first."""
    from stages.pipeline.runlock import RunLock, RunLocked
    from stages.preflight.checks import check_before_download

    try:
        settings = load_settings(command_line_variables())
        check_executor(settings)
        check_confinement(settings.confinement, settings.python_binary)
        for environment in settings.grading_environments:  # each grading environment under the same policy
            check_confinement(settings.confinement, environment.python)
        command_line = invoked()
        if command_line.runs_tasks:
            check_before_download(settings, command_line.requested_tasks)
            lock = RunLock(settings.run_paths.lock).acquire()
            on_exit_now(lock.release)
            atexit.register(lock.release)
        if not command_line.reads_run_folders_only:  # export, runs, compare: no generation setting is used
            check_run_identity(settings, refuse=command_line.runs_tasks)
        return settings
    except (ConfigError, ConfinementUnavailable) as error:
        _exit_with_line(f"config error: {error}", CONFIG_ERROR.code)
    except RunLocked as error:
        _exit_with_line(str(error), RUN_LOCKED.code)
    except OSError as error:
        _exit_with_line(unwritable_line(error), UNWRITABLE.code)
    raise AssertionError("unreachable")


def check_run_identity(settings: Settings, *, refuse: bool) -> None:
    """A run folder is one configuration (stages/generate/identity.py): a command that runs tasks records the folder's
    identity at its first run and refuses other generation settings (IdentityMismatch); any other command prints
    the difference once and goes on."""
    from stages.generate.identity import IdentityMismatch, check_identity

    found = check_identity(settings, record=refuse)
    if found is None:
        return
    if refuse:
        raise IdentityMismatch(found.refusal())
    print(found.note(), file=sys.stderr)


def _exit_with_line(text: str, code: int) -> None:
    print(f"scicode: {text}", file=sys.stderr)
    raise SystemExit(code) from None


STOP_LINE_LIMIT = 8000  # characters of the line a stopped run ends with (a server's message in it included)
# Held by the first task thread that ends the run, never released: a run ends with one line, however many problems in
# flight meet the same stop at once (two problems' first calls refused with the same key).
RUN_ENDING = threading.Lock()
WRITE_ERRNOS: frozenset[int] = frozenset({errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT})


def unwritable_line(error: OSError) -> str:
    """One line for a folder that cannot be written (read-only, no permission, full)."""
    where = error.filename or "the results folder"
    return (
        f"cannot write {where}: {error.strerror or error} (choose a writable results_dir= / data_dir=, or free space)"
    )


def prepare_state_folder(folder: str, database: str) -> None:
    """The folder of doit's database exists and it and the database can be written, before doit opens it (doit
    would end in a sqlite traceback); else one line and exit 5. A probe file is made and removed, because root
    writes where the mode says it may not."""
    import tempfile

    try:
        Path(folder).mkdir(exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".writable-"):
            pass
        if os.path.lexists(database):
            with open(database, "r+b"):
                pass
    except OSError as error:
        where = error.filename or folder
        _exit_with_line(
            f"cannot write the state folder {where}: {error.strerror or error} (make it writable again, or "
            f"run doit from another folder)",
            UNWRITABLE.code,
        )


def check_executor(settings: Settings) -> None:
    """ConfigError when `executor=dask` cannot work here (the optional dask extra is not installed)."""
    if settings.executor != "dask":
        return
    from stages.score import missing_dependency

    reason = missing_dependency()
    if reason is not None:
        raise ConfigError(reason)


def problem_bound(settings: Settings) -> int:
    """The most problems a run of these settings can select (known before any file is downloaded)."""
    return len(settings.sample_ids) if settings.sample_ids else settings.benchmark.dataset.problem_count(settings.split)


def worker_threads() -> int:
    """doit threads: one per problem the run can select, plus one for the targets task.

    A problem runs one task at a time (`generate:<id>`, then `score:<id>`), so every task that becomes
    ready gets a thread at once and a problem is scored as soon as its generation ends. The stages bound
    the work themselves: `concurrency` problems generated at once, `score_workers` test processes."""
    try:
        settings = load_settings(command_line_variables())
    except ConfigError:
        return 1  # the creators report the error
    return problem_bound(settings) + 1


def guarded(function: Callable[..., Any], *args: Any) -> Callable[[], TaskFailed | None]:
    """A doit python-action that turns the pipeline's own errors into a one-line task failure."""

    def action() -> TaskFailed | None:
        try:
            outcome = function(*args)
        except RunStopped as error:
            end_run(str(error), error.exit_code)
        except PipelineError as error:
            return TaskFailed(own_error_line(error))
        except OSError as error:
            if error.errno not in WRITE_ERRNOS:
                raise
            return TaskFailed(unwritable_line(error))
        return outcome if isinstance(outcome, TaskFailed) else None

    action.__name__ = getattr(function, "__name__", "action")
    return action


def own_error_line(error: PipelineError) -> str:
    """The one line of the pipeline's own error: its message, which names the bad input (the class is internal)."""
    return str(error) or "failed without a reason"


def end_run_with_config_error(error: ConfigError) -> None:
    """During the run (tasks may be running in other threads): one line, the lock released, exit 3 at once."""
    RUN_ENDING.acquire()  # a later caller waits here until the process exits
    print(f"scicode: config error: {error}", file=sys.stderr)
    exit_now(CONFIG_ERROR.code)


def end_run(line: str, code: int) -> None:
    """A failure that stops the whole run (an endpoint that cannot serve it, a key refused mid-run), while tasks
    may be running in other threads: every test process and snippet is stopped, nothing cut short is saved
    (finished work is), one line, the lock released, exit `code` at once; when several tasks meet a stop at once,
    the first one's line is the run's."""
    RUN_ENDING.acquire()  # a later caller waits here until the process exits
    live_processes.abort_all()
    print(f"scicode: {shown(line, limit=STOP_LINE_LIMIT)}", file=sys.stderr)  # may quote the endpoint: neutralised
    exit_now(code)


def check_requested_problems(settings: Settings, selected: list[str] | None) -> None:
    """After select: `doit generate:<id>` / `score:<id>` of a problem not selected ends the run with one line."""
    from stages.preflight.checks import check_task_names

    if selected is None:
        return
    try:
        check_task_names(settings, invoked().requested_tasks, selected)
    except ConfigError as error:
        end_run_with_config_error(error)


def stop_on_config_error(function: Callable[..., Any], *args: Any) -> Callable[[], TaskFailed | None]:
    """Like `guarded`, but a ConfigError (a bad selection, a failed preflight check) ends the whole run at once with
    one line: nothing else is worth running, and no model is called."""

    def checked(*values: Any) -> Any:
        try:
            return function(*values)
        except ConfigError as error:
            end_run_with_config_error(error)

    checked.__name__ = getattr(function, "__name__", "action")
    return guarded(checked, *args)


def stop_on_setup_error(function: Callable[..., Any], *args: Any) -> Callable[[], TaskFailed | None]:
    """For the task every other one waits for (download): any failure of the pipeline's own (missing data, a bad
    h5py_file=, ...) ends the run at once with one line and exit 3, before any other task, instead of one
    "not run" line per task that depended on it."""

    def checked(*values: Any) -> Any:
        try:
            return function(*values)
        except ConfigError as error:
            end_run_with_config_error(error)
        except RunStopped:
            raise
        except PipelineError as error:
            end_run_with_config_error(ConfigError(own_error_line(error)))

    checked.__name__ = getattr(function, "__name__", "action")
    return guarded(checked, *args)


def clean_action(name: str, *args: Any) -> Callable[[], None]:
    """A `doit clean` action: `stages.pipeline.clean.<name>(*args)`."""

    def action() -> None:
        from stages.pipeline import clean

        getattr(clean, name)(*args)

    action.__name__ = action.__qualname__ = name
    return action


def subset_problem_ids(settings: Settings) -> list[str]:
    """The problems of a subset named on the command line (empty for the full run): what `doit clean` of that
    subset removes the details of."""
    from stages.select.stage import selected_problem_ids, viewed_problem_ids

    if not settings.run_paths.summary_tag:
        return []
    return selected_problem_ids(settings) or viewed_problem_ids(settings)


def clean_actions(name: str, settings: Settings, problem_id: str) -> list[Callable[[], None]]:
    """A problem's `doit clean` action, only when this command removes something of it (`stages.pipeline.clean.removes`):
    doit prints a line for every clean action it executes, so a problem whose files are kept has none."""
    from stages.pipeline import clean

    return [clean_action(name, settings, problem_id)] if clean.removes(name, settings, problem_id) else []


def group_clean_actions(settings: Settings) -> list[Callable[[], None]]:
    """The `generate` group's `doit clean` action: only for `doit clean generate` on a folder without generations,
    to say so (a folder with some gets its problems' actions, `clean_actions`)."""
    from stages.pipeline import clean

    return [clean_action("say_when_no_generation", settings)] if clean.says_no_generation(settings) else []


def problems_in_generation_order(settings: Settings) -> list[ExpectedWork]:
    """The selected problems with their expected work, in `stages.execution.scheduling.generation_order`; the count goes
    to the live view. Empty when the selection is missing or stale."""
    from stages.progress.activity import ACTIVITY
    from stages.score import expected_work
    from stages.select.stage import selected_problem_ids

    selected = selected_problem_ids(settings) or []
    ACTIVITY.set_problems(len(selected))
    work = [expected_work(settings, problem_id) for problem_id in selected]
    ACTIVITY.set_steps_to_generate(settings.attempts * sum(item.answers for item in work))
    return generation_order(work)


def generation_admissions(settings: Settings) -> list[tuple[str, float]]:
    """`problems_in_generation_order` with each problem's admission priority: its place in that order (the
    first highest), so the problems are admitted in that order whichever thread reaches the problem pool first."""
    from stages.select.stage import selected_problem_ids, viewed_problem_ids

    if not invoked().executes_tasks and selected_problem_ids(settings) is None:
        return [(problem_id, 0.0) for problem_id in viewed_problem_ids(settings)]
    order = problems_in_generation_order(settings)
    return [(work.problem_id, float(len(order) - place)) for place, work in enumerate(order)]


def explain_action(settings: Settings) -> Callable[[list[str]], TaskFailed | None]:
    """The `doit explain <task> ...` action: one line per named task (stages.pipeline.tasks.explain)."""

    def explain_tasks(names: list[str]) -> TaskFailed | None:
        from stages.pipeline.tasks import UnknownTask, explain

        if not names:
            return TaskFailed("name the tasks to explain, e.g. `doit explain score:10 summarize`")
        try:
            lines = [explain(settings, name) for name in names]
        except UnknownTask as error:
            return TaskFailed(str(error))
        print("\n".join(lines))
        return None

    return explain_tasks
