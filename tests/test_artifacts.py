"""Artifact files: validated on write and on read, and the same bytes validated once per process."""

from __future__ import annotations

from pathlib import Path

import pytest

from stages import artifacts
from stages.artifacts import read_artifact, write_artifact


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
    monkeypatch.setattr(artifacts, "validate", lambda kind, record: (calls.append(kind), real_validate(kind, record)))
    assert read_artifact(path, "manifest") is not None
    assert read_artifact(path, "manifest") is not None
    assert calls == []
    # Other bytes (a tampered file) are validated again, and an invalid one is not an artifact.
    path.write_text(path.read_text(encoding="utf-8").replace('"files": {}', '"files": 3'), encoding="utf-8")
    assert read_artifact(path, "manifest") is None
    assert calls == ["manifest"]
