"""Write the schema files of `schemas/` from the record declarations.

    python -m scripts.schema_files [--check] [--folder DIR]

Each kind of GENERATED is written from its declaration (`stages.records.schema_of`: a record's fields, their
`key(schema=...)` and the record's `record_schema`; `common` from `stages.records.common_schema`); those of
HAND_KEPT are kept by hand, each for the reason it gives. `--check` writes nothing and exits 1 when a
committed file differs from the generated one.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from stages.compare.record import ComparisonRecord
from stages.records.common_schema import common_schema
from stages.records.details import Details
from stages.records.failure_records import NotGeneratedRecord, NotScoredRecord
from stages.records.generation import Generation
from stages.records.manifest import Manifest
from stages.records.schema_of import artifact_schema
from stages.records.selection import Selection
from stages.records.summary import Summary
from stages.storage.json_values import JSONObject, JSONValue
from stages.storage.paths import SCHEMAS_DIR

COMMAND = "python -m scripts.schema_files"
# The kinds whose schema file is generated, each with what generates it.
GENERATED: dict[str, Callable[[], JSONObject]] = {
    "common": common_schema,
    "selection": lambda: artifact_schema(Selection),
    "manifest": lambda: artifact_schema(Manifest),
    "generation": lambda: artifact_schema(Generation),
    "not_generated": lambda: artifact_schema(NotGeneratedRecord),
    "not_scored": lambda: artifact_schema(NotScoredRecord),
    "summary": lambda: artifact_schema(Summary),
    "details": lambda: artifact_schema(Details),
    "compare": lambda: artifact_schema(ComparisonRecord),
}
# The schema files kept by hand, each with why.
HAND_KEPT: dict[str, str] = {
    "config": "not a record: the resolved settings (`Settings.redacted()`, declared in stages/config) with a few keys "
    "required and the API key forbidden",
    "identity": "not a record: the generate stage's settings slice as written, and where it came from",
    "targets": "not a record yet: the derive stage writes the derived targets' record as a dict "
    "(stages/targets/derive.py)",
}
LINE_WIDTH = 120  # a value whose JSON fits on one line at its indent is written on one line
INDENT = "  "


def schema_file_name(kind: str) -> str:
    return f"{kind}.schema.json"


def schema_text(kind: str) -> str:
    """The text of a generated schema file."""
    return json_text(GENERATED[kind]()) + "\n"


def json_text(value: JSONValue, depth: int = 0) -> str:
    """`value` as indented JSON, with each object or array that fits in LINE_WIDTH at its place on one line."""
    flat = json.dumps(value, ensure_ascii=False)
    if len(INDENT * depth) + len(flat) <= LINE_WIDTH or not isinstance(value, (dict, list)) or not value:
        return flat
    inner = INDENT * (depth + 1)
    if isinstance(value, dict):
        parts = [f"{inner}{json.dumps(key)}: {json_text(item, depth + 1)}" for key, item in value.items()]
        return "{\n" + ",\n".join(parts) + "\n" + INDENT * depth + "}"
    parts = [inner + json_text(item, depth + 1) for item in value]
    return "[\n" + ",\n".join(parts) + "\n" + INDENT * depth + "]"


def stale_files(folder: Path) -> list[str]:
    """The generated kinds whose file in `folder` is missing or differs from the generated text."""
    stale = []
    for kind in GENERATED:
        path = folder / schema_file_name(kind)
        current = path.read_text(encoding="utf-8") if path.is_file() else ""
        if current != schema_text(kind):
            stale.append(path.name)
    return stale


def write_files(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for kind in GENERATED:
        path = folder / schema_file_name(kind)
        path.write_text(schema_text(kind), encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the schema files from the record declarations.")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file is stale")
    parser.add_argument("--folder", type=Path, default=SCHEMAS_DIR, help=f"the schema folder (default: {SCHEMAS_DIR})")
    args = parser.parse_args(argv)
    folder: Path = args.folder
    if args.check:
        stale = stale_files(folder)
        if stale:
            print(f"stale in {folder}: {', '.join(stale)}: run {COMMAND}", file=sys.stderr)
            return 1
        print(f"{len(GENERATED)} schema files in {folder} are current")
        return 0
    for path in write_files(folder):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
