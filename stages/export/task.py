"""The `export` task kind: the run's steps as CSV/JSONL and an inspect_ai log, written whenever `doit export` names
it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from stages.config.task_kind import TaskKind, never_up_to_date, run_whenever_named

if TYPE_CHECKING:
    from stages.config.settings import Settings


def write_export(settings: Settings) -> list[Path]:
    from stages.export.stage import write_export as write

    return write(settings)


EXPORT = TaskKind("export", write_export, never_up_to_date, other_reasons=run_whenever_named)
