"""What a doit command line asks for: the command word, the task names, and what that implies for the run.

The command line is parsed once per process (`invoked()`, a `CommandLine`); every question about it is a property
of that record, so no module reads `sys.argv` itself.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

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
_NO_RUN_FOLDER_TASKS = frozenset({"compare", "download", "environments", "explain", "runs", "export"})
_TASKS_WITH_ARGUMENTS = frozenset({"explain"})  # the words after these are their arguments, not task names


def _command_and_tasks(argv: Sequence[str]) -> tuple[str, tuple[str, ...]]:
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
                return word, ()
        else:
            names.append(word)
            if word in _TASKS_WITH_ARGUMENTS:
                break
    return "run", tuple(names)


def _stage_names(names: Sequence[str]) -> list[str]:
    """`generate:10` -> `generate`: the stage of each task name."""
    return [name.split(":", 1)[0] for name in names]


def _names_stage(words: Sequence[str], stage: str) -> bool:
    """True when `stage` (or `stage:<id>`) is one of the words, whatever the command (`doit clean generate`)."""
    return any(word == stage or word.startswith(f"{stage}:") for word in words)


def program_name(argv0: str) -> str:
    """`doit` for `doit ...` and for `python -m doit ...` (whose argv[0] is doit/__main__.py)."""
    path = Path(argv0)
    return path.parent.name if path.name == "__main__.py" else path.name


@dataclass(frozen=True)
class CommandLine:
    """One doit command line, parsed: `words` are the arguments after the program, `command` the doit command
    word (`run` when none is given) and `task_names` the tasks a `run` names (empty for the default task)."""

    program: str
    words: tuple[str, ...]
    command: str
    task_names: tuple[str, ...]

    @classmethod
    def parse(cls, argv: Sequence[str], program: str = "doit") -> CommandLine:
        command, names = _command_and_tasks(argv)
        return cls(program, tuple(argv), command, names)

    @property
    def requested_tasks(self) -> list[str]:
        """The task names (variables, options and the command word removed); for a command that is not a run
        (list/info/forget/..., which see the whole graph), the command word alone."""
        return list(self.task_names) if self.command == "run" else [self.command]

    @property
    def executes_tasks(self) -> bool:
        """True for `doit run` (the default command); False for list, info, forget, clean, ..."""
        return self.command == "run"

    @property
    def runs_tasks(self) -> bool:
        """True for a command that executes tasks writing a run (`doit`, `doit run ...`, `doit <task>`), not
        list/info/forget/clean nor the tasks that write no run folder."""
        names = self.requested_tasks
        if names and all(name in _NO_RUN_FOLDER_TASKS for name in names):
            return False
        return self.executes_tasks

    @property
    def reads_run_folders_only(self) -> bool:
        """True for `doit export` / `runs` / `compare` / ...: tasks that read run folders and use no generation
        setting."""
        names = self.requested_tasks
        return self.executes_tasks and bool(names) and all(name in _NO_RUN_FOLDER_TASKS for name in names)

    @property
    def generation_only(self) -> bool:
        """True for `doit generate` / `doit generate:<id>`: no scoring, so targets are not needed."""
        stages = _stage_names(self.requested_tasks)
        return bool(stages) and all(stage == "generate" for stage in stages)

    @property
    def rescore_only(self) -> bool:
        """True for `doit score` / `doit score:<id>`: rescore existing generations, never call a model."""
        stages = _stage_names(self.requested_tasks)
        return bool(stages) and all(stage in _RESCORE_TASKS for stage in stages)

    @property
    def runs_summary(self) -> bool:
        """True when the command runs `summarize`: `doit` / `doit run` (the default task), or `summarize` named."""
        return self.executes_tasks and (not self.task_names or "summarize" in self.task_names)

    @property
    def names_generate(self) -> bool:
        """True when `generate` (or `generate:<id>`) is named, as on `doit clean generate`."""
        return _names_stage(self.words, "generate")

    @property
    def names_score(self) -> bool:
        """True when `score` (or `score:<id>`) is named, as on `doit clean score`."""
        return _names_stage(self.words, "score")

    def shown(self) -> str:
        """The command as typed, `doit` first (what the run lock records of the process holding it)."""
        return " ".join([self.program, *self.words])


@lru_cache(maxsize=4)
def _parsed(argv: tuple[str, ...]) -> CommandLine:
    return CommandLine.parse(argv[1:], program_name(argv[0]) if argv else "doit")


def invoked() -> CommandLine:
    """This process's command line, parsed once (a test that sets `sys.argv` gets its own parse)."""
    return _parsed(tuple(sys.argv))
