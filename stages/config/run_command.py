"""How a command line names one run folder, spelled out for the hints that suggest a command on it.

A run folder is `<results_dir>/scicode/<model>/<run>/`; `model=` and `run=` (plus `results_dir=` when it is not the
default) name it whatever the other settings are. `doit clean generate` removes paid answers only from a folder its
own command line names this way, and only with `confirm=true` (stages/pipeline/clean.py).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from stages.config.settings import Settings

RUN_NAMING_VARIABLES: tuple[str, ...] = ("model", "run")  # a clean of generations needs one of these given
CONFIRM_WORD = "confirm=true"


def run_variables(settings: Settings) -> str:
    """`model=X run=Y` (and `results_dir=Z` when not the default): the words that name this run's folder."""
    words = [f"model={settings.model}", f"run={settings.run_name}"]
    if settings.results_dir != Settings.results_dir:
        words.append(f"results_dir={settings.results_dir}")
    return " ".join(shlex.quote(word) for word in words)


def clean_generations_command(settings: Settings, task: str = "generate") -> str:
    """The command that removes this run's generations (`task` may be `generate:<id>`), spelled in full."""
    return f"doit clean {task} {run_variables(settings)} {CONFIRM_WORD}"


def names_run(variables: Mapping[str, str]) -> bool:
    """Whether a command line's `name=value` words name a run folder (`model=` or `run=`)."""
    return any(name in variables for name in RUN_NAMING_VARIABLES)
