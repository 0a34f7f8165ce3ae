"""The `select` task kind: its action, its up-to-date check and the artifacts that check compares."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stages.config.task_kind import ArtifactCheck, TaskKind

if TYPE_CHECKING:
    from stages.config.settings import Settings


def run_select(settings: Settings) -> object:
    from stages.select.stage import run_select as select

    return select(settings)


def select_artifacts(settings: Settings) -> list[ArtifactCheck]:
    from stages.select.stage import config_fingerprint_parts, selection_fingerprint_parts

    paths = settings.run_paths
    return [
        ArtifactCheck(paths.selection, "selection", lambda: selection_fingerprint_parts(settings)),
        ArtifactCheck(paths.config, "config", lambda: config_fingerprint_parts(settings)),
    ]


def selection_is_current(settings: Settings) -> bool:
    from stages.select.stage import config_fingerprint, selection_fingerprint
    from stages.storage.artifacts import is_current

    paths = settings.run_paths
    return is_current(paths.selection, "selection", selection_fingerprint(settings)) and is_current(
        paths.config, "config", config_fingerprint(settings)
    )


SELECT = TaskKind("select", run_select, selection_is_current, select_artifacts)
