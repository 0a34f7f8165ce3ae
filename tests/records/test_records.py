"""The typed records of the artifacts: each reads every format of its file (tests/golden) and writes back what
it read, key order included (the bytes the pipeline wrote)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from stages.records.details import Details
from stages.records.generation import Generation
from stages.records.manifest import Manifest
from stages.records.selection import Selection
from stages.records.summary import Summary
from stages.storage.json_values import FrozenObject, JSONObject, freeze_object
from tests.golden.make_golden import BEFORE_PARTS, CURRENT
from tests.support.pipeline_support import assert_ok, data_args, run_dir, run_doit

RECORDS: dict[str, Callable[[FrozenObject], Details | Generation | Manifest | Selection | Summary]] = {
    "selection": Selection.from_record,
    "generation": Generation.from_record,
    "details": Details.from_record,
    "manifest": Manifest.from_record,
    "summary": Summary.from_record,
}


def written(record: JSONObject) -> str:
    """The text `stages.storage.artifacts.write_artifact` writes for `record`."""
    return json.dumps({"schema_version": 1, **record}, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


@pytest.mark.parametrize("folder", [CURRENT, BEFORE_PARTS], ids=["current", "before_parts"])
@pytest.mark.parametrize("kind", RECORDS)
def test_a_golden_file_reads_into_its_record_and_back(folder: Path, kind: str) -> None:
    stored = json.loads((folder / f"{kind}.json").read_text(encoding="utf-8"))
    record = RECORDS[kind](freeze_object(stored))
    assert {"schema_version": 1, **record.to_record()} == stored
    assert RECORDS[kind](freeze_object(record.to_record())) == record


def test_the_records_are_deeply_immutable() -> None:
    stored = json.loads((CURRENT / "details.json").read_text(encoding="utf-8"))
    details = Details.from_record(freeze_object(stored))
    with pytest.raises(AttributeError):
        details.status = "x"  # type: ignore[misc]
    attempt = details.attempts[0]
    with pytest.raises(TypeError):
        attempt.final_codes["1.1"] = "x"  # type: ignore[index]
    with pytest.raises(TypeError):
        attempt.trajectory[0]["step_id"] = "x"  # type: ignore[index]


def test_each_file_a_run_writes_is_its_record_written_back_byte_for_byte(
    workdir: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    args = (
        *data_args(staged_data_dir, dev_targets),
        "split=validation",
        "sample_ids=1,4",
    )
    assert_ok(run_doit(workdir, *args))
    run = run_dir(workdir, "gold", "validation-tool_use-bg")
    files = {
        "manifest": [staged_data_dir / "scicode" / "manifest.json"],
        "selection": list(run.glob("selection*.json")),
        "generation": sorted((run / "generations").glob("*.json")),
        "details": sorted((run / "details").glob("*.json")),
        "summary": list(run.glob("summary*.json")),
    }
    assert all(len(paths) >= 1 for paths in files.values()), files
    for kind, paths in files.items():
        for path in paths:
            text = path.read_text(encoding="utf-8")
            record = RECORDS[kind](freeze_object(json.loads(text)))
            assert written(record.to_record()) == text, path
