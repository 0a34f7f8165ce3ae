"""One parse per artifact file per process: the memo of `stages.storage.store`, keyed by what the file is on
disk, fed by the writer, re-reading a rewritten file."""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import pytest

from stages.storage.artifacts import read_artifact, read_frozen, write_artifact
from stages.storage.json_values import JSONObject
from stages.storage.store import parse_counts
from tests.support.pipeline_support import assert_ok, data_args, run_dir, run_doit_counting_parses
from tests.support.run_artifacts import json_object

PROBLEMS = ("1", "3", "4")
RUN = "validation-tool_use-bg"  # sample_ids runs share the folder of their split, mode and background


def _manifest(files: JSONObject | None = None) -> JSONObject:
    return {
        "fingerprint": "f" * 64,
        "status": "complete",
        "files": files or {},
        "official_targets": False,
        "targets": {"kind": "missing", "path": None},
        "verify_checksums": True,
    }


def parses_of(path: Path, kind: str = "manifest") -> int:
    return parse_counts().get((kind, os.path.abspath(path)), 0)


def test_what_the_writer_wrote_is_read_without_a_parse(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    write_artifact(path, "manifest", _manifest())
    assert read_frozen(path, "manifest") is read_frozen(path, "manifest")
    assert read_artifact(path, "manifest") == {"schema_version": 1, **_manifest()}
    assert parses_of(path) == 0


def test_a_file_is_parsed_once_until_it_is_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    write_artifact(path, "manifest", _manifest())
    text = path.read_text(encoding="utf-8")
    other = tmp_path / "other.json"
    other.write_text(text, encoding="utf-8")
    os.replace(other, path)  # another process's atomic write: a new inode
    assert read_frozen(path, "manifest") is not None and read_frozen(path, "manifest") is not None
    assert parses_of(path) == 1
    entry = {"size": 1, "sha256": "0" * 64, "source": "x", "checksum": "verified"}
    path.write_text(text.replace('"files": {}', f'"files": {{"a": {str(entry).replace(chr(39), chr(34))}}}'))
    record = read_frozen(path, "manifest")  # the same inode rewritten in place: another size
    assert record is not None and parses_of(path) == 2
    files = record["files"]
    assert isinstance(files, Mapping) and list(files) == ["a"]
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # only the mtime changes
    assert read_frozen(path, "manifest") is not None and parses_of(path) == 3
    path.write_text("{")  # an invalid file is remembered as such, too
    assert read_frozen(path, "manifest") is None and read_frozen(path, "manifest") is None
    assert parses_of(path) == 4


def test_the_shared_record_cannot_be_changed_and_plain_reads_are_copies(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    write_artifact(path, "manifest", _manifest())
    record = read_frozen(path, "manifest")
    assert record is not None
    with pytest.raises(TypeError):
        record["status"] = "partial"  # type: ignore[index]
    plain = read_artifact(path, "manifest")
    assert plain is not None
    json_object(plain["files"])["x"] = 1
    assert read_artifact(path, "manifest") == {"schema_version": 1, **_manifest()}


def test_threads_reading_one_new_file_parse_it_once(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    write_artifact(path, "manifest", _manifest())
    replacement = tmp_path / "replacement.json"
    replacement.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    os.replace(replacement, path)
    barrier = threading.Barrier(8)
    found: list[object] = []

    def read() -> None:
        barrier.wait()
        found.append(read_frozen(path, "manifest"))

    threads = [threading.Thread(target=read) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(found) == 8 and all(record is found[0] for record in found) and found[0] is not None
    assert parses_of(path) == 1


def _kind_of(run: Path, path: str) -> str | None:
    """generations, details or manifest for the files whose parses the run counts; None for others."""
    where = Path(path)
    if where.name == "manifest.json":
        return "manifest"
    if where.parent.parent == run and where.parent.name in ("generations", "details"):
        return where.parent.name
    return None


def test_a_run_parses_each_generation_details_and_manifest_file_at_most_once(
    workdir: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    args = (
        *data_args(staged_data_dir, dev_targets),
        "split=validation",
        f"sample_ids={','.join(PROBLEMS)}",
    )
    run = run_dir(workdir, "gold", RUN)
    for _ in ("first run", "no-op rerun"):
        result, counts = run_doit_counting_parses(workdir, *args)
        assert_ok(result)
        counted = {(kind, path): count for (kind, path), count in counts.items() if _kind_of(run, path)}
        assert all(count <= 1 for count in counted.values()), counted
    # The rerun parsed what the first run had written (a new process: nothing known yet), each file once.
    kinds = Counter(_kind_of(run, path) for _, path in counted)
    assert kinds == {"generations": len(PROBLEMS), "details": len(PROBLEMS), "manifest": 1}, counted
    # A rewritten file is parsed again by the next process that reads it, and once.
    generation = run / "generations" / "1.json"
    generation.write_text(generation.read_text(encoding="utf-8"), encoding="utf-8")
    result, counts = run_doit_counting_parses(workdir, *args)
    assert_ok(result)
    assert counts.get(("generation", str(generation))) == 1
