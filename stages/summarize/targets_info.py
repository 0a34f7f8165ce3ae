"""Which targets a run's verdicts were scored against (official, an explicit file, derived, missing), as the summary
records and judges them (`stages.summarize.caveats`, `stages.summarize.published_setting`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from stages.benchmark.pins import pinned_sha256, pins
from stages.config.settings import Settings
from stages.errors import PipelineError

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
