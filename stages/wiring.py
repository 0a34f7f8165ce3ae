"""Glue between doit and the stages: settings from the command line, up-to-date checks, clean failures.

Kept out of `dodo.py` so that file reads as the task graph alone.
"""
from __future__ import annotations

import signal
import sys
from typing import Any, Callable, Iterable, Sequence

from doit.exceptions import TaskFailed

from stages.config import ConfigError, Settings, load_settings

# doit run options that take a value (so the word after them is not a task name).
_OPTIONS_WITH_VALUE = frozenset(
    {"-f", "--file", "-d", "--dir", "-n", "--process", "-P", "--parallel-type",
     "-r", "--reporter", "-o", "--output-file", "--db-file", "--backend", "--check_file_uptodate",
     "-v", "--verbosity", "--codec-cls"}
)
_DOIT_COMMANDS = frozenset({"run", "list", "info", "forget", "clean", "ignore", "help", "auto", "dumpdb",
                            "strace", "tabcompletion", "reset-dep"})
_RESCORE_TASKS = frozenset({"score"})


class _Interrupted(KeyboardInterrupt):
    """SIGTERM, turned into KeyboardInterrupt so doit saves the records of finished tasks."""


def raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise _Interrupted(f"terminated by signal {signum}")


def install_interrupt_handling() -> None:
    """SIGTERM raises KeyboardInterrupt (doit then saves what finished); it ends with one line, no traceback."""
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
    previous_hook = sys.excepthook

    def hook(kind: type[BaseException], error: BaseException, traceback: Any) -> None:
        if issubclass(kind, KeyboardInterrupt):
            print(f"scicode: interrupted ({error or 'keyboard'}); finished work is saved: "
                  "rerun the same command to resume", file=sys.stderr)
            return
        previous_hook(kind, error, traceback)

    sys.excepthook = hook


def _cmdline_vars() -> dict[str, str]:
    from doit import doit_cmd

    return dict(doit_cmd._CMDLINE_VARS or {})


def settings_or_exit() -> Settings:
    """Settings from doit's `name=value` words; a bad configuration stops doit with one line, before any work."""
    try:
        settings = load_settings(_cmdline_vars())
        check_executor(settings)
        return settings
    except ConfigError as error:
        print(f"scicode: config error: {error}", file=sys.stderr)
        raise SystemExit(3) from None


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
    from stages.errors import PIPELINE_ERRORS

    def action() -> TaskFailed | None:
        try:
            outcome = function(*args)
        except PIPELINE_ERRORS as error:
            return TaskFailed(f"{type(error).__name__}: {error}")
        return outcome if isinstance(outcome, TaskFailed) else None

    action.__name__ = getattr(function, "__name__", "action")
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
    from stages.select import selected_problem_ids
    from stages.problems import load_problems
    from stages.targets import resolve_targets

    if resolve_targets(settings).kind != "missing":
        return False
    selected = set(selected_problem_ids(settings) or ())
    return any(problem.problem_id in selected for problem in load_problems(settings.data_paths, "validation"))


def summarize_and_report(settings: Settings) -> TaskFailed | None:
    """Write the summary, then fail the task when problems failed (the summary still counts them)."""
    from stages.summarize import run_summarize

    outcome = run_summarize(settings)
    print(outcome.one_line)
    print(f"summary: {outcome.summary_md}")
    return run_failure(settings)


def failed_problems(settings: Settings) -> list[dict[str, str]]:
    from stages.artifacts import read_artifact

    record = read_artifact(settings.run_paths.summary_json, "summary")
    return list(record["failed_problems"]) if record else []


def run_failure(settings: Settings) -> TaskFailed | None:
    """One line saying which problems failed and what would fix them; None for a clean run."""
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
