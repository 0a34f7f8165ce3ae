"""Artifact files: validated on write and on read, and the same bytes validated once per process."""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import example, given

from stages.execution.untrusted import valid_text
from stages.storage import artifacts
from stages.storage.artifacts import atomic_write_text, fingerprint, read_artifact, write_artifact
from stages.storage.json_values import JSONObject
from stages.storage.paths import SCHEMAS_DIR
from tests.support.hostile import hostile_text
from tests.support.run_artifacts import json_at, json_object


def _manifest() -> dict:
    return {
        "fingerprint": "f" * 64,
        "status": "complete",
        "files": {},
        "official_targets": False,
        "targets": {"kind": "missing", "path": None},
        "verify_checksums": True,
    }


def test_what_this_process_wrote_is_read_back_without_a_second_validation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "manifest.json"
    try:
        write_artifact(path, "manifest", _manifest())
    except artifacts.ArtifactError as error:  # the schema's required keys, named in one line
        pytest.fail(f"the test record no longer matches the manifest schema: {error}")
    calls: list[str] = []
    real_validate = artifacts.validate

    def counted_validate(kind: str, record: dict[str, Any]) -> None:
        calls.append(kind)
        real_validate(kind, record)

    monkeypatch.setattr(artifacts, "validate", counted_validate)
    assert read_artifact(path, "manifest") is not None
    assert read_artifact(path, "manifest") is not None
    assert calls == []
    # Other bytes (a tampered file) are validated again, and an invalid one is not an artifact.
    path.write_text(path.read_text(encoding="utf-8").replace('"files": {}', '"files": 3'), encoding="utf-8")
    assert read_artifact(path, "manifest") is None
    assert calls == ["manifest"]


@given(hostile_text())
@example("def f():\n    return '\ud800'\n")
def test_any_untrusted_text_can_be_written_hashed_and_read_back(text: str) -> None:
    # issue 20: a lone surrogate in an answer or an exception message failed the first UTF-8 write
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "manifest.json"
        entry: JSONObject = {"size": 0, "sha256": "0" * 64, "source": text, "checksum": "verified"}
        write_artifact(path, "manifest", {**_manifest(), "files": {text[:50]: entry}})
        record = read_artifact(path, "manifest")
        assert record is not None and [json_at(e, "source") for e in json_object(record["files"]).values()] == [
            valid_text(text)
        ]
        atomic_write_text(Path(folder) / "summary.md", text)
        assert (Path(folder) / "summary.md").read_bytes().decode("utf-8") == valid_text(text)
    assert len(fingerprint({"code": text})) == 64


def test_lone_surrogates_keep_distinct_fingerprints() -> None:
    assert fingerprint("\ud800") != fingerprint("\ud801") != fingerprint("\ufffd")
    assert fingerprint("plain") == hashlib.sha256(b'"plain"').hexdigest()  # valid text hashes as before


@pytest.mark.parametrize("schema_file", sorted(SCHEMAS_DIR.glob("*.schema.json")), ids=lambda path: path.name)
def test_every_schema_file_is_valid_against_its_metaschema(schema_file: Path) -> None:
    """The run trusts its schema files (it validates records against them, never the files themselves)."""
    schema = json.loads(schema_file.read_text(encoding="utf-8"))
    jsonschema.validators.validator_for(schema).check_schema(schema)
