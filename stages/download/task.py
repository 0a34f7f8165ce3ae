"""The `download` task kind: its action, its up-to-date check and the artifact that check compares."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stages.config.task_kind import ArtifactCheck, TaskKind

if TYPE_CHECKING:
    from stages.config.settings import Settings


def run_download(settings: Settings) -> object:
    from stages.download.stage import run_download as download

    return download(settings)


def download_artifacts(settings: Settings) -> list[ArtifactCheck]:
    from stages.download.stage import download_fingerprint_parts

    return [ArtifactCheck(settings.benchmark.record_path, "manifest", lambda: download_fingerprint_parts(settings))]


def download_is_current(settings: Settings) -> bool:
    from stages.download.stage import download_fingerprint
    from stages.storage.artifacts import is_current

    return is_current(settings.benchmark.record_path, "manifest", download_fingerprint(settings))


DOWNLOAD = TaskKind("download", run_download, download_is_current, download_artifacts)
