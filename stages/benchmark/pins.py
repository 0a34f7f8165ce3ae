"""The pinned facts of the benchmark (checksums, prefilled steps, split files), loaded from pins.json."""

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


class TargetsOrigin(TypedDict):
    """The official targets file's size and where it comes from (one phrase each), for the missing-targets error."""

    size: str
    source: str


class Pins(TypedDict):
    """pins.json (its `_comment` says what each entry is)."""

    files: dict[str, str]  # file name -> sha256
    required_files: list[str]
    upstream_names: dict[str, str]  # upstream name -> local name
    targets_file: str
    targets_file_origin: TargetsOrigin
    prefilled_steps: dict[str, str]  # step id -> file name of its official code
    prefilled_reason: str
    splits: dict[str, str]  # split -> problem file
    split_problem_counts: dict[str, int]
    wheel: Wheel
    default_dataset_zip_url: str
    reference_step_seconds: dict[str, float]  # step id -> measured seconds


@lru_cache(maxsize=1)
def pins() -> Pins:
    table: Pins = json.loads(PINS_FILE.read_text(encoding="utf-8"))  # this package's own file
    return table


def pinned_sha256(file_name: str) -> str | None:
    return pins()["files"].get(file_name)


def required_files() -> list[str]:
    return list(pins()["required_files"])


def prefilled_steps() -> dict[str, str]:
    """Step id -> file name of the official code of that prefilled (unscored) step."""
    return dict(pins()["prefilled_steps"])


def split_files() -> dict[str, str]:
    return dict(pins()["splits"])


def split_problem_count(split: str) -> int:
    """Problems in a split of the pinned files (`all` is every split)."""
    counts = pins()["split_problem_counts"]
    return sum(counts.values()) if split == "all" else int(counts[split])


def reference_step_seconds() -> dict[str, float]:
    """Measured wall times of the slow reference steps, by step id."""
    return {str(step_id): float(seconds) for step_id, seconds in pins().get("reference_step_seconds", {}).items()}
