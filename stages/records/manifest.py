"""data/scicode/manifest.json: the staged SciCode data files (size, digest, where each came from, whether its
checksum was verified) and the validation targets the download found."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from stages.records.stamp import Stamp
from stages.storage.artifacts import read_typed
from stages.storage.json_values import (
    Frozen,
    FrozenObject,
    JSONObject,
    JSONValue,
    flag,
    integer,
    obj,
    optional_text,
    text,
    texts,
)

KIND = "manifest"
TargetsKind = Literal["official", "explicit", "derived", "missing"]
TARGETS_KINDS: tuple[TargetsKind, ...] = ("official", "explicit", "derived", "missing")


def _targets_kind(value: Frozen) -> TargetsKind:
    return next((kind for kind in TARGETS_KINDS if kind == value), "missing")


@dataclass(frozen=True)
class ManifestFile:
    size: int
    sha256: str
    source: str
    checksum: str  # verified, unpinned or mismatch-allowed

    @classmethod
    def from_record(cls, record: FrozenObject) -> ManifestFile:
        return cls(
            integer(record.get("size")),
            text(record.get("sha256")),
            text(record.get("source")),
            text(record.get("checksum")),
        )

    def to_record(self) -> JSONObject:
        return {"size": self.size, "sha256": self.sha256, "source": self.source, "checksum": self.checksum}


@dataclass(frozen=True)
class ManifestTargets:
    """The targets the download found: official, explicit (h5py_file=), derived or missing."""

    kind: TargetsKind
    path: str | None
    sha256: str | None = None
    note: str | None = None

    @classmethod
    def from_record(cls, record: FrozenObject) -> ManifestTargets:
        return cls(
            _targets_kind(record.get("kind")),
            optional_text(record.get("path")),
            optional_text(record.get("sha256")),
            optional_text(record.get("note")),
        )

    def to_record(self) -> JSONObject:
        record: JSONObject = {"kind": self.kind, "path": self.path, "sha256": self.sha256}
        if self.note is not None:
            record["note"] = self.note
        return record


@dataclass(frozen=True)
class Manifest:
    stamp: Stamp
    verify_checksums: bool
    official_targets: bool
    targets: ManifestTargets
    files: tuple[tuple[str, ManifestFile], ...]  # in the order written
    warnings: tuple[str, ...] | None = None  # None: written before warnings were kept
    status: str = "complete"

    @classmethod
    def from_record(cls, record: FrozenObject) -> Manifest:
        files = obj(record.get("files"))
        warnings = record.get("warnings")
        return cls(
            Stamp.from_record(record),
            flag(record.get("verify_checksums")),
            flag(record.get("official_targets")),
            ManifestTargets.from_record(obj(record.get("targets"))),
            tuple((name, ManifestFile.from_record(obj(entry))) for name, entry in files.items()),
            None if warnings is None else texts(warnings),
            text(record.get("status"), "complete"),
        )

    def to_record(self) -> JSONObject:
        record: JSONObject = self.stamp.to_record() | {
            "status": self.status,
            "verify_checksums": self.verify_checksums,
            "official_targets": self.official_targets,
            "targets": self.targets.to_record(),
            "files": {name: entry.to_record() for name, entry in self.files},
        }
        if self.warnings is not None:
            warnings: list[JSONValue] = list(self.warnings)
            record["warnings"] = warnings
        return record

    @property
    def fingerprint(self) -> str:
        return self.stamp.fingerprint

    @property
    def by_name(self) -> dict[str, ManifestFile]:
        return dict(self.files)


def read_manifest_file(path: Path) -> Manifest | None:
    """The manifest at `path` (parsed once per file version in this process); None when missing or invalid."""
    return read_typed(path, KIND, Manifest.from_record)
