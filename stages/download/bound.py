"""Download stage of a manifest-bound dataset (SciCode-Verified): its problem file and published manifest in
`<data_dir>/<its folder>/`, checked as its own harness checks them, and its targets when staged.

- Files staged by hand in that folder are used as they are; missing ones are fetched from the dataset's published
  location at the pinned revision (`dataset_base_url` replaces the published base URL, e.g. a local mirror). Both
  files are fetched into temp files and placed only once they check out.
- The problem file's md5 must be the one its manifest states, and its problems the manifest's `n_problems` in its
  `problem_order` (`stages.benchmark.manifest_bound`); a fetched file must also be the pinned revision's (its md5
  the description's), unless `verify_checksums=false` (then a warning line). A hand-staged pair of another revision
  is accepted as its own manifest binds it, and recorded as such.
- Targets: `h5py_file=`, else the dataset's targets file beside the problems, checked against the manifest's
  `h5_md5`; without one, the record says what is missing and where it is published.
- The official prompt templates and prefilled steps' code come from the original files' folder (staged there by
  the original download's sources when missing).

The record (`record_file` of the dataset, a `manifest` artifact) lists every file with its sha256 and how it was
checked; the md5 the manifest states is in the selection and the run identity.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from stages.benchmark import manifest_bound
from stages.benchmark.datasets import ManifestBinding, ProblemDataError, PublishedSource
from stages.benchmark.problems import Benchmark
from stages.config.fingerprints import FingerprintParts, digest, settings_slice
from stages.config.settings import Settings
from stages.download.fetch import SourceUnavailable, StagedFile, already_placed, discard, fetch_file, file_identity
from stages.errors import PipelineError
from stages.records.manifest import KIND as MANIFEST_KIND
from stages.records.manifest import Manifest, ManifestFile, ManifestTargets, TargetsKind
from stages.records.stamp import Stamp
from stages.storage.artifacts import fingerprint, is_current, read_artifact, sha256_file, write_artifact
from stages.storage.json_values import JSONObject

WARNING_PREFIX = "warning: download: "
TEMPLATE_FILES: tuple[str, ...] = ("multistep_template.txt", "background_comment_template.txt")


class BoundDataError(PipelineError, RuntimeError):
    """A manifest-bound dataset's files could not be staged or do not match their manifest."""


def _bound_parts(benchmark: Benchmark) -> tuple[ManifestBinding, PublishedSource]:
    binding, published = benchmark.dataset.manifest, benchmark.dataset.published
    if binding is None or published is None:
        raise BoundDataError(f"dataset={benchmark.name} is not manifest-bound")
    return binding, published


def shared_files(benchmark: Benchmark) -> tuple[str, ...]:
    """The files of the original folder a dataset's prompts and prefilled steps use."""
    return (*TEMPLATE_FILES, *sorted(set(benchmark.dataset.prefilled_steps.values())))


# ---------------------------------------------------------------------------
# Fingerprint: the dataset, its pins, the base URL, and the identity (size, mtime) of every staged file
# ---------------------------------------------------------------------------


def bound_fingerprint_parts(settings: Settings) -> FingerprintParts:
    benchmark = settings.benchmark
    binding, published = _bound_parts(benchmark)
    names = (*benchmark.dataset.problem_files, binding.file, benchmark.dataset.targets_file)
    staged = {name: file_identity(benchmark.file(name)) for name in names}
    shared = {name: file_identity(benchmark.shared.file(name)) for name in shared_files(benchmark)}
    explicit = file_identity(settings.explicit_targets_file())
    pins = {"dataset": benchmark.name, "revision": published.revision, "problems_md5": published.problems_md5}
    covered = {
        "settings": settings.fingerprint("download"),
        "pins": pins,
        "base_url": settings.dataset_base_url,
        "staged": staged,
        "shared": shared,
        "explicit_targets": explicit,
    }
    inputs = {
        "pinned revision": digest(pins),
        f"files staged in {benchmark.folder}": digest(staged),
        f"templates and prefilled code in {benchmark.shared.scicode_dir}": digest(shared),
        "h5py_file": digest(explicit),
    }
    return FingerprintParts(fingerprint(covered), settings=settings_slice(settings, "download"), inputs=inputs)


# ---------------------------------------------------------------------------
# Staging
# ---------------------------------------------------------------------------


def _warn(warnings: list[str], message: str) -> None:
    print(WARNING_PREFIX + message, file=sys.stderr, flush=True)
    warnings.append(message)


def _gather(settings: Settings, published: PublishedSource) -> list[StagedFile]:
    """Each published file: in place when staged by hand, else fetched into a temp file beside its place."""
    benchmark = settings.benchmark
    batch: list[StagedFile] = []
    try:
        for name in published.files:
            path = benchmark.file(name)
            if path.is_file():
                batch.append(already_placed(path, f"staged in {benchmark.folder}"))
                continue
            url = published.url(settings.dataset_base_url, name)
            batch.append(fetch_file(url, benchmark.folder, name, f"fetched {url}"))
    except SourceUnavailable as problem:
        discard(batch, benchmark.folder)
        raise BoundDataError(
            f"dataset={benchmark.name}: cannot fetch {problem}; stage {', '.join(published.files)} by hand in "
            f"{benchmark.folder.resolve()} (revision {published.revision} of its published location)"
        ) from None
    except BaseException:
        discard(batch, benchmark.folder)
        raise
    return batch


def _check_batch(settings: Settings, batch: list[StagedFile], warnings: list[str]) -> str:
    """Check the batch as the dataset's harness does (files still in their temp places); their checksum state."""
    benchmark = settings.benchmark
    binding, published = _bound_parts(benchmark)
    by_name = {staged.name: staged for staged in batch}
    manifest_path = by_name[binding.file].path
    manifest = manifest_bound.read_published_manifest(manifest_path, binding)
    problems_name = benchmark.dataset.problem_files[0]
    stated = manifest_bound.manifest_problems_md5(manifest, binding)
    checked = by_name[problems_name]
    shown = f"{benchmark.file(problems_name)} ({checked.source})"
    manifest_bound.check_file_md5(checked.path, stated, benchmark.file(binding.file), shown)
    if stated == published.problems_md5:
        return "verified"
    fetched = [staged.name for staged in batch if staged.source.startswith("fetched ")]
    detail = (
        f"{problems_name}: md5 {stated} (its manifest's) is not the pinned revision {published.revision}'s "
        f"md5 {published.problems_md5}"
    )
    if fetched and settings.verify_checksums:
        raise BoundDataError(
            f"checksum mismatch for fetched {detail}; point dataset_base_url= at the pinned revision, or set "
            "verify_checksums=false to accept it"
        )
    if fetched:
        _warn(warnings, f"checksum mismatch accepted because verify_checksums=false: {detail}")
        return "mismatch-allowed"
    _warn(warnings, f"staged by hand, bound by its own manifest: {detail}")
    return "manifest-bound"


def _place(batch: list[StagedFile], folder: Path) -> None:
    for staged in batch:
        if staged.path != folder / staged.name:
            os.replace(staged.path, folder / staged.name)


def _targets(settings: Settings, binding: ManifestBinding) -> tuple[bool, ManifestTargets]:
    """The targets (explicit, else beside the problems), md5-checked against the manifest's; or missing."""
    benchmark = settings.benchmark
    explicit = settings.explicit_targets_file()
    path = explicit if explicit is not None else benchmark.file(benchmark.dataset.targets_file)
    if not path.is_file():
        if explicit is not None:
            raise BoundDataError(f"invalid h5py_file={settings.h5py_file}: no such file {explicit.resolve()}")
        note = (
            f"no {benchmark.dataset.targets_file} in {benchmark.folder.resolve()} and no h5py_file=: it is published "
            f"in the {benchmark.dataset.targets_published}"
        )
        return False, ManifestTargets("missing", None, None, note)
    manifest_path = benchmark.file(binding.file)
    manifest = manifest_bound.read_published_manifest(manifest_path, binding)
    manifest_bound.check_file_md5(path, str(manifest.get(binding.targets_md5, "")), manifest_path)
    kind: TargetsKind = "explicit" if explicit is not None else "official"
    note = f"{benchmark.name} targets, md5 {manifest.get(binding.targets_md5)} as {manifest_path.name} states"
    return True, ManifestTargets(kind, str(path), sha256_file(path), note)


# How the original dataset's files are staged (`stages.download.stage.stage_original_files`): given by the caller, so
# that this module, which that one dispatches to, never imports it back.
StageOriginalFiles = Callable[[Settings, list[str]], dict[str, ManifestFile]]


def run_bound_download(settings: Settings, stage_original_files: StageOriginalFiles) -> JSONObject:
    """Stage a manifest-bound dataset's files, and with `stage_original_files` the templates and prefilled code it
    shares with the original (in the original's folder); returns its record (unchanged when already current)."""
    benchmark = settings.benchmark
    record_path = benchmark.record_path
    if is_current(record_path, MANIFEST_KIND, bound_fingerprint_parts(settings).value):
        current = read_artifact(record_path, MANIFEST_KIND)
        if current is not None:
            return current
    binding, published = _bound_parts(benchmark)
    record_path.unlink(missing_ok=True)  # a stale record must not outlive a failed run
    benchmark.folder.mkdir(parents=True, exist_ok=True)
    warnings: list[str] = []
    batch = _gather(settings, published)
    try:
        state = _check_batch(settings, batch, warnings)
    except (ProblemDataError, BoundDataError):
        discard(batch, benchmark.folder)
        raise
    _place(batch, benchmark.folder)
    benchmark.problems("all")  # every problem parses, in the manifest's number and order
    official, targets = _targets(settings, binding)
    if not official:
        _warn(warnings, targets.note or "no targets")
    files = {
        staged.name: ManifestFile(staged.size, staged.sha256, staged.source, state) for staged in batch
    } | stage_original_files(settings, list(shared_files(benchmark)))
    manifest = Manifest(
        stamp=Stamp.of(bound_fingerprint_parts(settings)),
        verify_checksums=settings.verify_checksums,
        official_targets=official,
        targets=targets,
        files=tuple(files.items()),
        warnings=tuple(warnings),
    )
    return write_artifact(record_path, MANIFEST_KIND, manifest.to_record())
