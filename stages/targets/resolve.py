"""Which targets file the scorer reads: official or explicit targets from the download manifest, else
current derived targets, else missing. Never hashes the large HDF5 file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from stages.config.settings import Settings
from stages.records.manifest import read_manifest_file
from stages.storage.artifacts import read_frozen
from stages.storage.json_values import integer, obj, objects, optional_text, text
from stages.targets.derive import RECORD_KIND, derived_record_path, derived_targets_current

TargetsKind = Literal["official", "explicit", "derived", "missing"]


@dataclass(frozen=True)
class ResolvedTargets:
    kind: TargetsKind
    path: Path | None
    sha256: str | None
    note: str


def resolve_targets(settings: Settings) -> ResolvedTargets:
    """Official or explicit targets from the download manifest, else current derived targets, else missing.

    With `h5py_file=` set, only that file counts: when the manifest does not describe it, targets are missing.

    Cheap: reads two small JSON records and stats files; the sha256 comes from those records.
    """
    data_paths = settings.data_paths
    from_manifest, manifest_note = _manifest_targets(settings)
    if from_manifest is not None:
        return from_manifest
    if settings.explicit_targets_file() is not None:  # an explicit file is never silently replaced
        return ResolvedTargets("missing", None, None, manifest_note)
    if "validation" not in settings.benchmark.dataset.splits:  # derived targets are the official validation split's
        return ResolvedTargets("missing", None, None, manifest_note)
    record = read_frozen(derived_record_path(data_paths), RECORD_KIND)
    if record is not None and derived_targets_current(settings):
        failed = [text(step.get("step_id")) for step in objects(record.get("steps")) if step.get("status") != "ok"]
        note = f"{integer(obj(record.get('counts')).get('steps_ok'))} validation steps"
        if failed:
            note += f"; no targets for {len(failed)} steps whose derivation failed: {', '.join(failed)}"
        return ResolvedTargets("derived", data_paths.derived_targets, optional_text(record.get("sha256")), note)
    derived_note = (
        "derived targets are out of date (run the targets stage)" if record is not None else "no derived targets"
    )
    return ResolvedTargets("missing", None, None, f"{manifest_note}; {derived_note}")


def _manifest_targets(settings: Settings) -> tuple[ResolvedTargets | None, str]:
    manifest = read_manifest_file(settings.benchmark.record_path)
    if manifest is None:
        return None, "no download manifest"
    targets = manifest.targets
    kind, path_text = targets.kind, targets.path
    explicit = settings.explicit_targets_file()
    if explicit is not None and (kind != "explicit" or path_text != str(explicit)):
        return None, f"the download manifest does not describe h5py_file={settings.h5py_file} (run the download stage)"
    if kind not in ("official", "explicit"):
        return None, targets.note or f"official targets {kind}"
    path = Path(path_text or "")
    if not path_text or not path.is_file():
        return None, f"the {kind} targets file {path} listed in the download manifest is gone"
    return ResolvedTargets(kind, path, targets.sha256, targets.note or f"{kind} targets"), ""
