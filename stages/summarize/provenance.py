"""Where a run's verdicts come from: the targets they were scored against, when the run started, and which
version of this project wrote its summary."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Literal

from stages.benchmark.pins import pinned_sha256, pins
from stages.config.settings import Settings
from stages.errors import PipelineError
from stages.records.invocations import invocations
from stages.records.summary import ProjectVersion, RecordedInvocation
from stages.storage.json_values import JSONObject
from stages.storage.paths import PROJECT_ROOT, RunPaths

PROJECT_NAME = "scicode-pipeline"
GIT_TIMEOUT_SECONDS = 5.0

TargetsKind = Literal["official", "explicit", "derived", "missing", "unknown"]


def _original_targets_sha256() -> str | None:
    return pinned_sha256(str(pins()["targets_file"]))


def pinned_targets_sha256(settings: Settings) -> str | None:
    """The sha256 the run's dataset pins for its targets file; None for a manifest-bound dataset, whose targets the
    download checks against its manifest's md5 instead."""
    dataset = settings.benchmark.dataset
    if dataset.is_manifest_bound:
        return None
    file_pins = dataset.file_pins()
    return file_pins.sha256(file_pins.targets_file)


@dataclass(frozen=True)
class TargetsInfo:
    kind: TargetsKind
    note: str
    sha256: str | None = None  # of the file scored against, where the download manifest records it
    pinned: str | None = field(default_factory=_original_targets_sha256)  # the dataset's pin of its targets file

    @property
    def official(self) -> bool:
        """Scored against the official targets: the official file (its pin, where a sha256 and a pin are known), or an
        explicit `h5py_file=` identical to the pinned file."""
        if self.kind == "official":
            return self.sha256 is None or self.pinned is None or self.sha256 == self.pinned
        return self.kind == "explicit" and self.sha256 is not None and self.sha256 == self.pinned


def resolve_targets_info(settings: Settings) -> TargetsInfo:
    """Which targets the steps were scored against (official, explicit file, derived, missing)."""
    try:
        from stages.targets import resolve_targets
    except ImportError as error:
        return TargetsInfo("unknown", f"targets could not be resolved: {error}")
    try:
        resolved = resolve_targets(settings)
    except PipelineError as error:  # the pipeline's own error: its message names the bad input
        return TargetsInfo("unknown", f"targets could not be resolved: {error}")
    except Exception as error:  # a summary is still written; the reason is shown in its first lines
        return TargetsInfo("unknown", f"targets could not be resolved: {type(error).__name__}: {error}")
    note = without_targets_path(str(resolved.note or ""), settings, resolved.path)
    return TargetsInfo(resolved.kind, note, resolved.sha256, pinned_targets_sha256(settings))


def without_targets_path(note: str, settings: Settings, resolved: Path | None) -> str:
    """`note` with the targets file named by its file name only: a summary is shared, the user's folders are not
    (an `h5py_file=/home/me/...` is shown as `test_data.h5`)."""
    explicit = settings.explicit_targets_file()
    named = [settings.h5py_file, str(explicit or ""), str(explicit.resolve()) if explicit else "", str(resolved or "")]
    for path in sorted((item for item in named if item and item != "auto"), key=len, reverse=True):
        note = note.replace(path, Path(path).name)
    return note


def _utc(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def recorded_invocations(paths: RunPaths, problem_ids: Sequence[str]) -> tuple[RecordedInvocation, ...]:
    """The run's invocations that generated or scored the problems, as the summary records them."""
    return tuple(
        RecordedInvocation(
            found.started_text(), found.ended_text(), round(found.seconds, 3), found.stages, found.problems
        )
        for found in invocations(paths, frozenset(problem_ids))
    )


def run_started(paths: RunPaths, problem_ids: Sequence[str]) -> str | None:
    """When the run's first invocation started (`stages.records.invocations`). For a run recorded before
    invocations were: the earliest generation or details file time (when its first problem finished), else
    config.json's time; None when neither exists."""
    recorded = invocations(paths, frozenset(problem_ids))
    if recorded:
        return recorded[0].started_text()
    times = []
    for problem_id in problem_ids:
        for path in (paths.generation(problem_id), paths.details(problem_id)):
            try:
                times.append(path.stat().st_mtime)
            except FileNotFoundError:
                continue
    if not times:
        try:
            times.append(paths.config.stat().st_mtime)
        except FileNotFoundError:
            return None
    return _utc(min(times))


def _git(*args: str) -> str | None:
    """The output of a git command in the project's folder; None when git or the repository is not there."""
    try:
        done = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@lru_cache(maxsize=1)
def project_version() -> ProjectVersion:
    """This project's name, installed version and git commit (None outside a checkout; `dirty` when tracked files
    differ from it)."""
    try:
        version: str | None = metadata.version(PROJECT_NAME)
    except metadata.PackageNotFoundError:
        version = None
    commit = _git("rev-parse", "HEAD")
    changes = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return ProjectVersion(PROJECT_NAME, version, commit, bool(changes) if commit else None)


def project_record() -> JSONObject:
    """`project_version` as a JSON object (the export's header records it)."""
    return project_version().to_record()
