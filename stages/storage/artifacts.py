"""Artifacts: schema-validated JSON files written atomically, each with a fingerprint of its inputs."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from functools import cache, partial
from pathlib import Path
from typing import Any, TypeVar

import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from stages.errors import PipelineError
from stages.execution import live_processes
from stages.execution.untrusted import valid_text
from stages.storage.json_values import FrozenObject, JSONObject, thaw_object
from stages.storage.paths import SCHEMAS_DIR
from stages.storage.store import MEMO, Validate

SCHEMA_VERSION = 1

R = TypeVar("R")


class ArtifactError(PipelineError, ValueError):
    """An artifact failed validation against its schema."""


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def fingerprint(value: Any) -> str:
    """sha256 of the canonical JSON of `value` (UTF-8; a lone surrogate, from untrusted text, is hashed as its
    own code unit rather than refused, so distinct strings keep distinct fingerprints)."""
    return hashlib.sha256(canonical_json(value).encode("utf-8", "surrogatepass")).hexdigest()


def sha256_file(path: Path) -> str:
    """sha256 of the file's bytes, hashed once per file version in this process (`stages.storage.store`)."""
    return MEMO.sha256(Path(path))


COMMON_SCHEMA = "common.schema.json"  # the parts every artifact schema shares, referenced by `$ref`


@cache
def _schema_registry() -> Registry[Any]:
    """Every schema file under its file name, so `{"$ref": "common.schema.json#/$defs/..."}` resolves."""
    resources = []
    for schema_path in sorted(SCHEMAS_DIR.glob("*.schema.json")):
        contents = json.loads(schema_path.read_text(encoding="utf-8"))
        resources.append((schema_path.name, Resource.from_contents(contents, default_specification=DRAFT202012)))
    return Registry().with_resources(resources)


@cache
def _validator(kind: str) -> jsonschema.protocols.Validator:
    """The validator of `kind`'s schema file. The files are generated from the record declarations and each is checked
    against its metaschema by the test suite (tests/storage/test_artifacts.py), not on every run: that check costs more than every
    validation a no-op rerun makes."""
    registry = _schema_registry()
    schema = registry.contents(f"{kind}.schema.json")
    return jsonschema.validators.validator_for(schema)(schema, registry=registry)


def validate(kind: str, record: JSONObject) -> None:
    errors = sorted(_validator(kind).iter_errors(record), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(root)"
        raise ArtifactError(f"{kind} artifact invalid at {where}: {first.message}")


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` through a temp file in the same folder and a rename (never once the run is
    being stopped: work still running then was cut short, its result must not look finished). The text is
    written as `untrusted.valid_text` makes it: a lone surrogate from model output becomes U+FFFD instead of
    failing the write (in JSON, where they can only stand inside strings, too)."""
    live_processes.raise_if_stopping()
    text = valid_text(text)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, _FILE_MODE)
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise


def _read_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_read_umask()  # read once at import: os.umask is process-wide, not thread-safe


def write_artifact(path: Path, kind: str, record: JSONObject) -> JSONObject:
    """Validate `record` against `schemas/<kind>.schema.json` and write it atomically; the process's memo of
    parsed artifacts then holds it as written (`stages.storage.store`). Returns the record."""
    record = {"schema_version": SCHEMA_VERSION, **record}
    validate(kind, record)
    dumped = json.dumps(record, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    text = valid_text(dumped)
    atomic_write_text(path, text)
    MEMO.remember_digest(Path(path), hashlib.sha256(text.encode("utf-8")).hexdigest())
    MEMO.remember(Path(path), kind, record if text is dumped else json.loads(text))
    return record


def is_valid(kind: str, record: JSONObject) -> bool:
    """Whether a parsed object is a valid artifact of `kind` in the current format."""
    if record.get("schema_version") != SCHEMA_VERSION:
        return False
    try:
        validate(kind, record)
    except ArtifactError:
        return False
    return True


def _validity(kind: str) -> Validate:
    return _VALIDITY.setdefault(kind, partial(is_valid, kind))


_VALIDITY: dict[str, Validate] = {}


def read_frozen(path: Path, kind: str) -> FrozenObject | None:
    """The artifact at `path`, deeply immutable and shared (parsed once per file version in this process), if
    it exists, parses and validates; None otherwise."""
    return MEMO.read(Path(path), kind, _validity(kind))


def read_typed(path: Path, kind: str, build: Callable[[FrozenObject], R]) -> R | None:
    """`build` of the valid artifact at `path` (a typed record's `from_record`), made once per file version."""
    return MEMO.cached_record(Path(path), kind, _validity(kind), build)


def read_artifact(path: Path, kind: str) -> JSONObject | None:
    """The artifact at `path` if it exists, parses and validates, as a plain dict of its own; None otherwise."""
    frozen = read_frozen(path, kind)
    return None if frozen is None else thaw_object(frozen)


def current_record(
    path: Path, kind: str, expected_fingerprint: str, *, require_status: tuple[str, ...] = ()
) -> FrozenObject | None:
    """The artifact when it exists, validates and carries the expected fingerprint (and status, if asked)."""
    record = read_frozen(path, kind)
    if record is None or record.get("fingerprint") != expected_fingerprint:
        return None
    return record if not require_status or record.get("status") in require_status else None


def is_current(path: Path, kind: str, expected_fingerprint: str, *, require_status: tuple[str, ...] = ()) -> bool:
    """True when the artifact exists, validates and carries the expected fingerprint (and status, if asked)."""
    return current_record(path, kind, expected_fingerprint, require_status=require_status) is not None
