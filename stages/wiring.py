"""Glue between doit and the stages: settings from the command line, up-to-date checks, clean failures.

Kept out of `dodo.py` so that file reads as the task graph alone.
"""
from __future__ import annotations

import atexit
import errno
import os
import signal
import sys
import threading
from typing import Any, Callable, Iterable, Sequence

from doit.exceptions import TaskFailed

from stages import live_processes
from stages.confinement import ConfinementUnavailable, check_confinement
from stages.config import ConfigError, Settings, load_settings
from stages.errors import PipelineError

# doit run options that take a value (so the word after them is not a task name).
_OPTIONS_WITH_VALUE = frozenset(
    {"-f", "--file", "-d", "--dir", "-n", "--process", "-P", "--parallel-type",
     "-r", "--reporter", "-o", "--output-file", "--db-file", "--backend", "--check_file_uptodate",
     "-v", "--verbosity", "--codec-cls"}
)
_DOIT_COMMANDS = frozenset({"run", "list", "info", "forget", "clean", "ignore", "help", "auto", "dumpdb",
                            "strace", "tabcompletion", "reset-dep"})
_RESCORE_TASKS = frozenset({"score"})
_NO_RUN_FOLDER_TASKS = frozenset({"compare", "download"})  # tasks that never write a run folder


class _Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM, raised in the main thread so doit saves the records of finished tasks."""


STOP_GRACE_SECONDS = 1.5  # after the first signal the process is gone within this, whatever still runs
_EXIT_CALLBACKS: list[Callable[[], None]] = []
_stop_signal: list[int] = []


def on_exit_now(callback: Callable[[], None]) -> None:
    """Run `callback` (e.g. release the run lock) when an interrupted run ends with `exit_now`."""
    _EXIT_CALLBACKS.append(callback)


def exit_now(code: int) -> None:
    """End the process at once: threads still running (cut short by the stop) are not waited for."""
    for callback in (*_EXIT_CALLBACKS, live_processes.remove_tracked_folders):
        try:
            callback()
        except Exception:  # noqa: BLE001 - nothing may delay the exit
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def interrupted_line(signum: int) -> str:
    what = "keyboard" if signum == signal.SIGINT else f"terminated by signal {signum}"
    return (f"scicode: interrupted ({what}); running tests and tool snippets were stopped, finished work is saved: "
            "rerun the same command to resume")


def stop_on_signal(signum: int, frame: Any) -> None:
    """First Ctrl-C / SIGTERM: kill every child of ours, stop saving, and leave doit's loop so it saves its records;
    a watchdog ends the process within STOP_GRACE_SECONDS in any case. Later signals change nothing."""
    if _stop_signal:
        return
    _stop_signal.append(signum)
    live_processes.abort_all()
    watchdog = threading.Timer(STOP_GRACE_SECONDS, _exit_after_stop)
    watchdog.daemon = True
    watchdog.start()
    raise _Interrupted(f"signal {signum}")


_exit_once = threading.Lock()


def _exit_after_stop() -> None:
    if not _exit_once.acquire(blocking=False):
        return  # the other path (watchdog or excepthook) is already ending the process
    print(interrupted_line(_stop_signal[0]), file=sys.stderr)
    exit_now(128 + _stop_signal[0])


def install_interrupt_handling() -> None:
    """Ctrl-C and SIGTERM stop the run at once (`stop_on_signal`) and end it with one line, no traceback."""
    signal.signal(signal.SIGTERM, stop_on_signal)
    signal.signal(signal.SIGINT, stop_on_signal)
    previous_hook = sys.excepthook

    def hook(kind: type[BaseException], error: BaseException, traceback: Any) -> None:
        if issubclass(kind, KeyboardInterrupt):
            if not _stop_signal:
                _stop_signal.append(signal.SIGINT)
            live_processes.abort_all()
            _exit_after_stop()
            return
        previous_hook(kind, error, traceback)

    sys.excepthook = hook


def _cmdline_vars() -> dict[str, str]:
    from doit import doit_cmd

    return dict(doit_cmd._CMDLINE_VARS or {})


def settings_or_exit() -> Settings:
    """Settings from doit's `name=value` words; a bad configuration stops doit with one line, before any work.

    For a command that runs tasks, also the checks the data already allows (replay file, category, sample_ids)
    and the run folder's lock: a second run on the same folder stops here with one line naming the first."""
    from stages.preflight import check_before_download
    from stages.runlock import RunLock, RunLocked

    try:
        settings = load_settings(_cmdline_vars())
        check_executor(settings)
        check_confinement(settings.confinement, settings.python_binary)
        if runs_tasks(sys.argv[1:]):
            check_before_download(settings, requested_tasks(sys.argv[1:]))
            lock = RunLock(settings.run_paths.lock).acquire()
            on_exit_now(lock.release)
            atexit.register(lock.release)
        return settings
    except (ConfigError, ConfinementUnavailable) as error:
        _exit_with_line(f"config error: {error}", 3)
    except RunLocked as error:
        _exit_with_line(str(error), 4)
    except OSError as error:
        _exit_with_line(unwritable_line(error), 5)
    raise AssertionError("unreachable")


def _exit_with_line(text: str, code: int) -> None:
    print(f"scicode: {text}", file=sys.stderr)
    raise SystemExit(code) from None


WRITE_ERRNOS: frozenset[int] = frozenset({errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT})


def unwritable_line(error: OSError) -> str:
    """One line for a folder that cannot be written (read-only, no permission, full)."""
    where = error.filename or "the results folder"
    return f"cannot write {where}: {error.strerror or error} (choose a writable results_dir= / data_dir=, or free space)"


def runs_tasks(argv: Sequence[str]) -> bool:
    """True for a command that executes tasks (`doit`, `doit run ...`, `doit <task>`), not list/info/forget/clean."""
    names = requested_tasks(argv)
    if names and all(name in _NO_RUN_FOLDER_TASKS for name in names):
        return False
    return executes_tasks(argv)


def generation_only(argv: Sequence[str]) -> bool:
    """True for `doit generate` / `doit generate:<id>`: no scoring, so targets are not needed."""
    names = requested_tasks(argv)
    return bool(names) and all(name.split(":", 1)[0] == "generate" for name in names)


def nothing_to_generate(settings: Settings) -> bool:
    """True when every selected problem's generations are current: no model will be called."""
    from stages.generate.stage import generations_current
    from stages.select import selected_problem_ids

    selected = selected_problem_ids(settings)
    return selected is not None and all(generations_current(settings, pid) for pid in selected)


def run_preflight(settings: Settings) -> None:
    """The checks before the first model call (stages.preflight); one line each."""
    from stages.preflight import check_before_generation

    for line in check_before_generation(settings, generation_only(sys.argv[1:])):
        print(f"preflight: {line}")


def check_executor(settings: Settings) -> None:
    """ConfigError when `executor=dask` cannot work here (the optional dask extra is not installed)."""
    if settings.executor != "dask":
        return
    from stages.score.dask_executor import missing_dependency

    reason = missing_dependency()
    if reason is not None:
        raise ConfigError(reason)


def problem_bound(settings: Settings) -> int:
    """The most problems a run of these settings can select (known before any file is downloaded)."""
    from stages.pins import split_problem_count

    return len(settings.sample_ids) if settings.sample_ids else split_problem_count(settings.split)


def worker_threads() -> int:
    """doit threads: one per problem the run can select, plus one for the targets task.

    A problem runs one task at a time (`generate:<id>`, then `score:<id>`), so every task that becomes
    ready gets a thread at once and a problem is scored as soon as its generation ends. The stages bound
    the work themselves: `concurrency` problems generated at once, `score_workers` test processes."""
    try:
        settings = load_settings(_cmdline_vars())
    except ConfigError:
        return 1  # the creators report the error
    return problem_bound(settings) + 1


def _command_and_tasks(argv: Sequence[str]) -> tuple[str, list[str]]:
    """The doit command word (`run` when none is given) and the task names of a command line."""
    names: list[str] = []
    words = iter(argv)
    for word in words:
        if word in _OPTIONS_WITH_VALUE:
            next(words, None)
        elif word.startswith("-") or "=" in word:
            continue
        elif not names and word in _DOIT_COMMANDS:
            if word != "run":
                return word, []
        else:
            names.append(word)
    return "run", names


def requested_tasks(argv: Sequence[str]) -> list[str]:
    """The task names on a doit command line (variables, options and the command word removed)."""
    command, names = _command_and_tasks(argv)
    return names if command == "run" else [command]  # not a run: list/info/forget/... see the whole graph


def executes_tasks(argv: Sequence[str]) -> bool:
    """True for `doit run` (the default command); False for list, info, forget, clean, ..."""
    return _command_and_tasks(argv)[0] == "run"


def rescore_only(argv: Sequence[str]) -> bool:
    """True for `doit score` / `doit score:<id>`: rescore existing generations, never call a model."""
    names = requested_tasks(argv)
    return bool(names) and all(name.split(":", 1)[0] in _RESCORE_TASKS for name in names)


def guarded(function: Callable[..., Any], *args: Any) -> Callable[[], TaskFailed | None]:
    """A doit python-action that turns the pipeline's own errors into a one-line task failure."""
    def action() -> TaskFailed | None:
        try:
            outcome = function(*args)
        except PipelineError as error:
            return TaskFailed(f"{type(error).__name__}: {error}")
        except OSError as error:
            if error.errno not in WRITE_ERRNOS:
                raise
            return TaskFailed(unwritable_line(error))
        return outcome if isinstance(outcome, TaskFailed) else None

    action.__name__ = getattr(function, "__name__", "action")
    return action


def end_run_with_config_error(error: ConfigError) -> None:
    """During the run (tasks may be running in other threads): one line, the lock released, exit 3 at once."""
    print(f"scicode: config error: {error}", file=sys.stderr)
    exit_now(3)


def check_requested_problems(settings: Settings, selected: list[str] | None) -> None:
    """After select: `doit generate:<id>` / `score:<id>` of a problem not selected ends the run with one line."""
    from stages.preflight import check_task_names

    if selected is None:
        return
    try:
        check_task_names(settings, requested_tasks(sys.argv[1:]), selected)
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


def clean_action(name: str, *args: Any) -> Callable[[], None]:
    """A `doit clean` action: `stages.clean.<name>(*args)`."""
    def action() -> None:
        from stages import clean

        getattr(clean, name)(*args)

    action.__name__ = action.__qualname__ = name
    return action


def problems_in_generation_order(settings: Settings) -> list[tuple[str, float]]:
    """The selected problems with their expected scoring seconds, slowest to score first (selection order
    among equals); the count goes to the live view. Empty when the selection is missing or stale."""
    from stages.activity import ACTIVITY
    from stages.score.stage import expected_problem_seconds
    from stages.select import selected_problem_ids

    selected = selected_problem_ids(settings) or []
    ACTIVITY.set_problems(len(selected))
    expected = [(problem_id, expected_problem_seconds(settings, problem_id)) for problem_id in selected]
    return sorted(expected, key=lambda item: -item[1])


def score_and_count(settings: Settings, problem_id: str) -> dict[str, Any]:
    """`run_score`, its attempt-0 step counts published to the live view."""
    from stages.activity import ACTIVITY
    from stages.score.stage import run_score

    outcome = run_score(settings, problem_id)
    ACTIVITY.add_scored(problem_id, outcome["passed"], outcome["scored"])
    return outcome


def details_current(settings: Settings, problem_id: str) -> bool:
    """Whether `details/<id>.json` is up to date; an up-to-date problem's step counts go to the live view."""
    from stages.activity import ACTIVITY
    from stages.artifacts import current_record
    from stages.score.stage import score_fingerprint

    record = current_record(settings.run_paths.details(problem_id), "details", score_fingerprint(settings, problem_id))
    if record is None:
        return False
    evaluation = record["attempts"][0]["meta"]["evaluation"]
    ACTIVITY.add_scored(problem_id, evaluation["total_correct"], evaluation["total_steps"])
    return True


def targets_needed(settings: Settings) -> bool:
    """True when the selection has validation problems and no usable targets exist yet."""
    from stages.select import selected_entries
    from stages.targets import resolve_targets

    if resolve_targets(settings).kind != "missing":
        return False
    return any(entry.split == "validation" for entry in selected_entries(settings))


def summarize_and_report(settings: Settings) -> TaskFailed | None:
    """Write the summary, then fail the task when problems failed (the summary still counts them)."""
    from stages.summarize import run_summarize

    outcome = run_summarize(settings)
    print(outcome.one_line)
    print(f"summary: {outcome.summary_md}")
    print(f"report: {outcome.report_html}")
    return run_failure(settings)


def failed_problems(settings: Settings) -> list[dict[str, str]]:
    from stages.artifacts import read_artifact

    record = read_artifact(settings.run_paths.summary_json, "summary")
    return list(record["failed_problems"]) if record else []


def run_failure(settings: Settings) -> TaskFailed | None:
    """One line saying which problems failed and what would fix them; None for a clean run."""
    from stages.run_conditions import sandbox_failure_line
    from stages.artifacts import read_artifact

    summary = read_artifact(settings.run_paths.summary_json, "summary") or {}
    sandbox_line = sandbox_failure_line(summary.get("tool_calls") or {})
    if sandbox_line:
        return TaskFailed(sandbox_line)
    failed = failed_problems(settings)
    if not failed:
        return None
    without_targets = [entry["problem_id"] for entry in failed if "eval_error" in entry["reason"]]
    others = [entry["problem_id"] for entry in failed if entry["problem_id"] not in without_targets]
    parts = []
    if others:
        parts.append(f"{len(others)} problem(s) failed in generation or scoring ({', '.join(others)}): "
                     "rerun `doit run` to retry them")
    if without_targets:
        parts.append(f"{len(without_targets)} problem(s) have steps without targets ({', '.join(without_targets)}): "
                     f"stage the official test_data.h5 in {settings.data_paths.scicode_dir} or set h5py_file=")
    return TaskFailed("; ".join(parts) + "; the summary counts them as unresolved")
