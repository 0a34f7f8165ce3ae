"""The pins of the original dataset's files (checksums, where they are published), loaded from pins.json."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import TypedDict

PINS_FILE = Path(__file__).with_name("pins.json")


class Wheel(TypedDict):
    """The official wheel that ships the problem files: its pip requirement and the folder of the files in it."""

    requirement: str
    data_prefix: str


class Pins(TypedDict):
    """pins.json (its `_comment` says what each entry is)."""

    files: dict[str, str]  # file name -> sha256
    required_files: list[str]
    upstream_names: dict[str, str]  # upstream name -> local name
    targets_file: str
    wheel: Wheel
    default_dataset_zip_url: str


@lru_cache(maxsize=1)
def pins() -> Pins:
    table: Pins = json.loads(PINS_FILE.read_text(encoding="utf-8"))  # this package's own file
    return table


def pinned_sha256(file_name: str) -> str | None:
    return pins()["files"].get(file_name)


def required_files() -> list[str]:
    return list(pins()["required_files"])
