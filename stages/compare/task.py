"""The `compare` task kind: the comparison of the two runs `runs=` names, written whenever `doit compare` names it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from stages.config.task_kind import TaskKind, never_up_to_date, run_whenever_named

if TYPE_CHECKING:
    from stages.config.settings import Settings


def write_comparison(settings: Settings) -> Path:
    from stages.compare.stage import write_comparison as write

    return write(settings)


COMPARE = TaskKind("compare", write_comparison, never_up_to_date, other_reasons=run_whenever_named)
