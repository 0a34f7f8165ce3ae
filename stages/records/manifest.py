"""data/scicode/manifest.json: the staged SciCode data files (size, digest, where each came from, whether its
checksum was verified) and the validation targets the download found."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from stages.records.declared import Declared, key, one_of
from stages.records.schema_of import ref, schema_of
from stages.records.stamp import Stamp
from stages.storage.artifacts import read_typed
from stages.storage.json_values import Frozen, JSONValue, obj

KIND = "manifest"
TargetsKind = Literal["official", "explicit", "derived", "missing"]
TARGETS_KINDS: tuple[TargetsKind, ...] = ("official", "explicit", "derived", "missing")


@dataclass(frozen=True)
class ManifestFile(Declared):
    size: int = field(metadata=key(schema={"minimum": 0}))
    sha256: str = field(metadata=key(schema=ref("sha256")))
    source: str
    checksum: str = field(  # verified, unpinned or mismatch-allowed
        metadata=key(schema={"enum": ["verified", "unpinned", "mismatch-allowed", "manifest-bound"]})
    )


@dataclass(frozen=True)
class ManifestTargets(Declared):
    """The targets the download found: official, explicit (h5py_file=), derived or missing."""

    kind: TargetsKind = field(metadata=key(read=one_of(TARGETS_KINDS, "missing")))
    path: str | None
    sha256: str | None = field(default=None, metadata=key(required=False))  # absent in early manifests
    note: str | None = field(default=None, metadata=key(omit="if_none"))


NamedFiles = tuple[tuple[str, ManifestFile], ...]


def _files(value: Frozen) -> NamedFiles:
    """`files`: an object of file names, read in the order written."""
    return tuple((name, ManifestFile.from_record(obj(entry))) for name, entry in obj(value).items())


def _files_record(files: NamedFiles) -> JSONValue:
    return {name: entry.to_record() for name, entry in files}


@dataclass(frozen=True, kw_only=True)
class Manifest(Declared):
    record_schema = {"title": "download manifest: the staged SciCode data files"}

    stamp: Stamp = field(metadata=key(flatten=True))
    status: str = field(default="complete", metadata=key(schema={"enum": ["complete"]}))
    verify_checksums: bool
    official_targets: bool = field(
        metadata=key(schema={"description": "true when the official test_data.h5 is present and verified"})
    )
    targets: ManifestTargets
    files: NamedFiles = field(  # in the order written
        metadata=key(
            read=_files,
            write=_files_record,
            schema={"type": "object", "additionalProperties": schema_of(ManifestFile)},
        )
    )
    # None: written before warnings were kept
    warnings: tuple[str, ...] | None = field(default=None, metadata=key(omit="if_none"))

    @property
    def fingerprint(self) -> str:
        return self.stamp.fingerprint

    @property
    def by_name(self) -> dict[str, ManifestFile]:
        return dict(self.files)


def read_manifest_file(path: Path) -> Manifest | None:
    """The manifest at `path` (parsed once per file version in this process); None when missing or invalid."""
    return read_typed(path, KIND, Manifest.from_record)
