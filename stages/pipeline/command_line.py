"""What a doit command line asks for: the command word, the task names, and what that implies for the run."""

from __future__ import annotations

from collections.abc import Sequence

# doit run options that take a value (so the word after them is not a task name).
_OPTIONS_WITH_VALUE = frozenset(
    {
        "-f",
        "--file",
        "-d",
        "--dir",
        "-n",
        "--process",
        "-P",
        "--parallel-type",
        "-r",
        "--reporter",
        "-o",
        "--output-file",
        "--db-file",
        "--backend",
        "--check_file_uptodate",
        "-v",
        "--verbosity",
        "--codec-cls",
    }
)
_DOIT_COMMANDS = frozenset(
    {
        "run",
        "list",
        "info",
        "forget",
        "clean",
        "ignore",
        "help",
        "auto",
        "dumpdb",
        "strace",
        "tabcompletion",
        "reset-dep",
    }
)
_RESCORE_TASKS = frozenset({"score"})
# tasks that never write a run's artifacts (no run lock, no preflight); `export` writes only its own export/ folder
_NO_RUN_FOLDER_TASKS = frozenset({"compare", "download", "explain", "runs", "export"})
_TASKS_WITH_ARGUMENTS = frozenset({"explain"})  # the words after these are their arguments, not task names


def runs_tasks(argv: Sequence[str]) -> bool:
    """True for a command that executes tasks (`doit`, `doit run ...`, `doit <task>`), not list/info/forget/clean."""
    names = requested_tasks(argv)
    if names and all(name in _NO_RUN_FOLDER_TASKS for name in names):
        return False
    return executes_tasks(argv)


def reads_run_folders_only(argv: Sequence[str]) -> bool:
    """True for `doit export` / `runs` / `compare` / ...: tasks that read run folders and use no generation setting."""
    names = requested_tasks(argv)
    return executes_tasks(argv) and bool(names) and all(name in _NO_RUN_FOLDER_TASKS for name in names)


def generation_only(argv: Sequence[str]) -> bool:
    """True for `doit generate` / `doit generate:<id>`: no scoring, so targets are not needed."""
    names = requested_tasks(argv)
    return bool(names) and all(name.split(":", 1)[0] == "generate" for name in names)


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
            if word in _TASKS_WITH_ARGUMENTS:
                break
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


def runs_summary(argv: Sequence[str]) -> bool:
    """True when the command runs `summarize`: `doit` / `doit run` (the default task), or `summarize` named."""
    command, names = _command_and_tasks(argv)
    return command == "run" and (not names or "summarize" in names)
