"""The `runs` task kind: the index of every run under results_dir, written whenever `doit runs` names it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from stages.config.task_kind import TaskKind, never_up_to_date, run_whenever_named

if TYPE_CHECKING:
    from stages.config.settings import Settings


def write_run_index(settings: Settings) -> Path:
    from stages.runs.page import write_run_index as write

    return write(settings)


RUNS = TaskKind("runs", write_run_index, never_up_to_date, other_reasons=run_whenever_named)
