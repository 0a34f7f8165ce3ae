"""The memo of parsed artifacts: each file is parsed and validated at most once per process while it stays
the same file.

A file is known by what it is on disk, `FileIdentity` (path, device, inode, size, mtime_ns), taken from the
open file itself so that the identity and the bytes read belong together. A rewrite (an atomic replace: a
new inode; or any change of size or mtime) is read again. The writer puts the record it wrote into the memo
(`remember`), so a stage reading back its own output parses nothing. Tasks run in threads of one process:
one lock per path makes two readers of the same file wait for one parse.

A typed record built from a file (`cached_record`) is memoised with it, keyed by its builder. `parse_counts`
says how often each (kind, path) was parsed in this process. File digests (`sha256`, also taken from the bytes a parse read) are memoised the same way,
and `hash_counts` says how often each file was hashed.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from stages.storage.json_values import FrozenObject, JSONObject, freeze_object

R = TypeVar("R")
_CHUNK = 1 << 20

Validate = Callable[[JSONObject], bool]  # whether a parsed object is a valid artifact of its kind


@dataclass(frozen=True)
class FileIdentity:
    path: str
    device: int
    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: str, stat: os.stat_result) -> FileIdentity:
        return cls(path, stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


@dataclass
class _Entry:
    identity: FileIdentity
    record: FrozenObject | None  # None: the file did not parse or validate
    built: dict[object, object] = field(default_factory=dict)


class ArtifactMemo:
    """Parsed artifacts by (kind, path), each valid for one `FileIdentity`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._path_locks: dict[tuple[str, str], threading.Lock] = {}
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._parses: Counter[tuple[str, str]] = Counter()
        self._digests: dict[str, tuple[FileIdentity, str]] = {}
        self._hashes: Counter[str] = Counter()

    def _path_lock(self, key: tuple[str, str]) -> threading.Lock:
        with self._lock:
            return self._path_locks.setdefault(key, threading.Lock())

    def _entry(self, path: Path, kind: str, valid: Validate) -> _Entry | None:
        """The memo entry of the file as it is now, parsing it when it is new or changed; None when it cannot
        be opened."""
        key = (kind, os.path.abspath(path))
        with self._path_lock(key):
            known = self._entries.get(key)
            try:
                if known is not None and known.identity == FileIdentity.of(key[1], os.stat(path)):
                    return known
                with open(path, "rb") as handle:
                    identity = FileIdentity.of(key[1], os.fstat(handle.fileno()))
                    data = handle.read()
            except OSError:
                return None
            entry = _Entry(identity, _parsed(data, valid))
            digest = hashlib.sha256(data).hexdigest()
            with self._lock:
                self._parses[key] += 1
                self._entries[key] = entry
                self._digests[key[1]] = (identity, digest)
            return entry

    def read(self, path: Path, kind: str, valid: Validate) -> FrozenObject | None:
        """The frozen record of the artifact at `path`; None when it is absent, does not parse or is invalid."""
        entry = self._entry(path, kind, valid)
        return None if entry is None else entry.record

    def cached_record(self, path: Path, kind: str, valid: Validate, build: Callable[[FrozenObject], R]) -> R | None:
        """`build` of the artifact's frozen record, built once per file version."""
        entry = self._entry(path, kind, valid)
        if entry is None or entry.record is None:
            return None
        with self._lock:
            if build in entry.built:
                return entry.built[build]  # type: ignore[return-value]
        made = build(entry.record)
        with self._lock:
            entry.built.setdefault(build, made)
        return made

    def remember(self, path: Path, kind: str, record: JSONObject) -> None:
        """Record what a writer has just written at `path` (a valid `record`), as the file now is."""
        key = (kind, os.path.abspath(path))
        with self._path_lock(key):
            try:
                identity = FileIdentity.of(key[1], os.stat(path))
            except OSError:
                return
            entry = _Entry(identity, freeze_object(record))
            with self._lock:
                self._entries[key] = entry

    def sha256(self, path: Path) -> str:
        """The sha256 of the file's bytes, hashed once per file version (a file this memo parsed or a writer
        wrote is not read again for it); OSError when it cannot be opened."""
        key = os.path.abspath(path)
        with self._path_lock(("digest", key)):
            try:
                known = self._digests.get(key)
                if known is not None and known[0] == FileIdentity.of(key, os.stat(path)):
                    return known[1]
            except OSError:
                pass
            with open(path, "rb") as handle:
                identity = FileIdentity.of(key, os.fstat(handle.fileno()))
                digest = hashlib.sha256()
                for chunk in iter(lambda: handle.read(_CHUNK), b""):
                    digest.update(chunk)
            value = digest.hexdigest()
            with self._lock:
                self._digests[key] = (identity, value)
                self._hashes[key] += 1
            return value

    def remember_digest(self, path: Path, value: str) -> None:
        """Record the digest of what a writer has just written at `path`."""
        key = os.path.abspath(path)
        with self._path_lock(("digest", key)):
            try:
                identity = FileIdentity.of(key, os.stat(path))
            except OSError:
                return
            with self._lock:
                self._digests[key] = (identity, value)

    def hash_counts(self) -> Mapping[str, int]:
        with self._lock:
            return dict(self._hashes)

    def parse_counts(self) -> Mapping[tuple[str, str], int]:
        with self._lock:
            return dict(self._parses)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._parses.clear()
            self._digests.clear()
            self._hashes.clear()


def _parsed(data: bytes, valid: Validate) -> FrozenObject | None:
    try:
        record = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or not valid(record):
        return None
    return freeze_object(record)


MEMO = ArtifactMemo()


def parse_counts() -> Mapping[tuple[str, str], int]:
    """How often this process parsed each artifact file, by (kind, path)."""
    return MEMO.parse_counts()


def hash_counts() -> Mapping[str, int]:
    """How often this process hashed each file, by path."""
    return MEMO.hash_counts()
