"""The `targets` task kind: derive targets when selected validation problems have none usable."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stages.config.task_kind import ArtifactCheck, TaskKind

if TYPE_CHECKING:
    from stages.config.settings import Settings


def run_targets(settings: Settings) -> object:
    from stages.targets import derive_targets

    return derive_targets(settings)


def targets_needed(settings: Settings) -> bool:
    """True when the selection has validation problems and no usable targets exist yet."""
    from stages.select.stage import selected_entries
    from stages.targets import resolve_targets

    if resolve_targets(settings).kind != "missing":
        return False
    return any(entry.split == "validation" for entry in selected_entries(settings))


def targets_are_available(settings: Settings) -> bool:
    return not targets_needed(settings)


def targets_artifacts(settings: Settings) -> list[ArtifactCheck]:
    from stages.targets.derive import RECORD_KIND, derived_record_path, derived_targets_fingerprint_parts

    return [
        ArtifactCheck(
            derived_record_path(settings.data_paths), RECORD_KIND, lambda: derived_targets_fingerprint_parts(settings)
        )
    ]


def targets_reasons(settings: Settings) -> list[str]:
    return [
        "selected validation problems have no usable targets (no official test_data.h5, no current derived targets)"
    ]


TARGETS = TaskKind("targets", run_targets, targets_are_available, targets_artifacts, targets_reasons)
