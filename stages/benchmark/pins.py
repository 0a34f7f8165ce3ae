"""The pinned facts of the benchmark (checksums, prefilled steps, split files), loaded from pins.json."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

PINS_FILE = Path(__file__).with_name("pins.json")


@lru_cache(maxsize=1)
def pins() -> dict[str, Any]:
    table: dict[str, Any] = json.loads(PINS_FILE.read_text(encoding="utf-8"))  # this package's own file
    return table


def pinned_sha256(file_name: str) -> str | None:
    checksums: dict[str, str] = pins()["files"]
    return checksums.get(file_name)


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
