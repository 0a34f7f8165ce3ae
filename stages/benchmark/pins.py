"""The pins of a dataset's files (checksums, upstream names, the wheel and archive that ship them): pins.json is the
original dataset's (its description names it)."""

from __future__ import annotations

import json
from dataclasses import dataclass
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


def pins() -> Pins:
    """pins.json: the original dataset's pins (the table its `FilePins` reads)."""
    return file_pins(PINS_FILE.name).table


def pinned_sha256(file_name: str) -> str | None:
    return pins()["files"].get(file_name)


def required_files() -> list[str]:
    return list(pins()["required_files"])


@dataclass(frozen=True)
class FilePins:
    """A dataset's pinned files (a pins file such as pins.json): which are required, their sha256, their upstream
    names, the targets file and the wheel that ships them."""

    table: Pins

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(self.table["required_files"])

    @property
    def targets_file(self) -> str:
        return str(self.table["targets_file"])

    @property
    def wheel(self) -> Wheel:
        return self.table["wheel"]

    @property
    def known_names(self) -> tuple[str, ...]:
        """Every file staged under these pins, under its local name."""
        return (*self.required, self.targets_file)

    def sha256(self, file_name: str) -> str | None:
        return self.table["files"].get(file_name)

    def local_name(self, file_name: str) -> str | None:
        """The local name of a known file given under its local or upstream name; None for anything else."""
        if file_name in self.known_names:
            return file_name
        return self.table["upstream_names"].get(file_name)

    def names_on_disk(self, name: str) -> tuple[str, ...]:
        """`name` followed by the upstream names that map to it (problems_all.jsonl for problems_test.jsonl)."""
        return (name, *(upstream for upstream, local in self.table["upstream_names"].items() if local == name))

    def display_name(self, name: str) -> str:
        aliases = self.names_on_disk(name)[1:]
        return f"{name} (upstream name {', '.join(aliases)})" if aliases else name


@lru_cache(maxsize=4)
def file_pins(file_name: str) -> FilePins:
    """The pins file `file_name` beside this module (a dataset's description names it)."""
    table: Pins = json.loads(PINS_FILE.with_name(file_name).read_text(encoding="utf-8"))  # this package's own file
    return FilePins(table)
