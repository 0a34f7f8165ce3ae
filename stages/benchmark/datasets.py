"""The datasets a run can score, one description each (datasets.json): `original` and `verified`.

A description says where a dataset's files live under `data_dir`, its splits and their problem files, the problems
never selected, the prefilled steps, where its targets come from, and, for a manifest-bound dataset, which fields of
its published manifest bind the files and where they are published (pinned revision). Every stage asks the run's
dataset (`Settings.benchmark`, a `stages.benchmark.problems.Benchmark`) instead of a process-wide table; adding a
dataset is adding one entry to datasets.json.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from stages.benchmark.pins import FilePins, file_pins
from stages.errors import PipelineError

DATASETS_FILE = Path(__file__).with_name("datasets.json")
DEFAULT_DATASET = "original"
PREFILLED_REASON = "official prefilled step"  # the reason of a prefilled step's `skipped` verdict, in every dataset


class ProblemDataError(PipelineError, ValueError):
    """The problem files are missing, malformed, or do not match their manifest."""


@dataclass(frozen=True)
class ManifestBinding:
    """The fields of a published manifest that bind a dataset's files (as the dataset's own harness checks them)."""

    file: str  # the manifest's file name, beside the problem file
    problems_md5: str  # field: md5 of the problem file
    n_problems: str  # field: number of problems
    problem_order: str  # field: the problem ids in file order
    targets_md5: str  # field: md5 of the targets file


@dataclass(frozen=True)
class PublishedSource:
    """Where a dataset's files are published, at a pinned revision, and the problem file's md5 at that revision."""

    base_url: str
    path: str  # `{revision}` and `{name}` are filled in
    revision: str
    files: tuple[str, ...]
    problems_md5: str

    def url(self, base_url: str, name: str) -> str:
        """The URL of `name` under `base_url` (the published one when empty)."""
        base = (base_url or self.base_url).rstrip("/")
        return f"{base}/{self.path.format(revision=self.revision, name=name)}"


@dataclass(frozen=True)
class Dataset:
    """One dataset's description (see the module docstring)."""

    name: str
    title: str
    display_name: str  # the name logs and exports give it (inspect_ai's dataset name)
    folder: str  # under data_dir: its problem files (and a manifest-bound dataset's manifest and targets)
    record_file: str  # the download stage's record of the staged files, in `folder`
    pins_file: (
        str | None
    )  # its files' pins (stages/benchmark/pins.json for the original); None when a manifest binds them
    shared_from: str  # the dataset whose folder holds the official prompt templates and the prefilled steps' code
    splits: Mapping[str, str]  # split -> problem file, in official order
    split_problem_counts: Mapping[str, int]
    excluded_problems: frozenset[str]
    prefilled_steps: Mapping[str, str]  # step id -> file of its official code (in the shared_from dataset's folder)
    targets_file: str
    protocol_environments: tuple[str, ...]  # the environments its published protocol grades every step in
    targets_size: str  # as an error line says it ("about 1.05 GB")
    targets_published: str
    manifest: ManifestBinding | None
    published: PublishedSource | None
    reference_step_seconds: Mapping[str, float]

    def split_names(self, split: str) -> tuple[str, ...]:
        """The splits `split` means: itself, or every split of the dataset for `all`."""
        return tuple(self.splits) if split == "all" else (split,)

    def has_split(self, split: str) -> bool:
        return split == "all" or split in self.splits

    def problem_count(self, split: str) -> int:
        """Problems in `split` of this dataset's pinned files (`all`: every split)."""
        return sum(int(self.split_problem_counts.get(name, 0)) for name in self.split_names(split))

    @property
    def problem_files(self) -> tuple[str, ...]:
        return tuple(self.splits.values())

    @property
    def is_manifest_bound(self) -> bool:
        return self.manifest is not None

    def file_pins(self) -> FilePins:
        """The pins of its files; ValueError for a dataset whose files a manifest binds instead."""
        if self.pins_file is None:
            raise ValueError(f"dataset {self.name} has no pins file: its manifest binds its files")
        return file_pins(self.pins_file)

    def shared(self) -> Dataset:
        """The dataset whose folder holds the official templates and prefilled code (itself for the original)."""
        return dataset_named(self.shared_from)


def _binding(record: Mapping[str, Any] | None) -> ManifestBinding | None:
    if record is None:
        return None
    return ManifestBinding(
        str(record["file"]),
        str(record["problems_md5"]),
        str(record["n_problems"]),
        str(record["problem_order"]),
        str(record["targets_md5"]),
    )


def _published(record: Mapping[str, Any] | None) -> PublishedSource | None:
    if record is None:
        return None
    return PublishedSource(
        str(record["base_url"]),
        str(record["path"]),
        str(record["revision"]),
        tuple(str(name) for name in record["files"]),
        str(record["problems_md5"]),
    )


def _dataset(name: str, record: Mapping[str, Any]) -> Dataset:
    return Dataset(
        name=name,
        title=str(record["title"]),
        display_name=str(record["display_name"]),
        folder=str(record["folder"]),
        record_file=str(record["record_file"]),
        pins_file=None if record.get("pins_file") is None else str(record["pins_file"]),
        shared_from=str(record["shared_from"]),
        splits=MappingProxyType({str(k): str(v) for k, v in record["splits"].items()}),
        split_problem_counts=MappingProxyType({str(k): int(v) for k, v in record["split_problem_counts"].items()}),
        excluded_problems=frozenset(str(pid) for pid in record["excluded_problems"]),
        prefilled_steps=MappingProxyType({str(k): str(v) for k, v in record["prefilled_steps"].items()}),
        targets_file=str(record["targets_file"]),
        protocol_environments=tuple(str(name) for name in record["protocol_environments"]),
        targets_size=str(record["targets_size"]),
        targets_published=str(record["targets_published"]),
        manifest=_binding(record.get("manifest")),
        published=_published(record.get("published")),
        reference_step_seconds=MappingProxyType(
            {str(k): float(v) for k, v in record.get("reference_step_seconds", {}).items()}
        ),
    )


@lru_cache(maxsize=1)
def datasets() -> Mapping[str, Dataset]:
    """Every described dataset by name, in the order of datasets.json (this package's own file)."""
    table = json.loads(DATASETS_FILE.read_text(encoding="utf-8"))
    return MappingProxyType({name: _dataset(name, record) for name, record in table.items() if name != "_comment"})


def dataset_names() -> tuple[str, ...]:
    return tuple(datasets())


def dataset_named(name: str) -> Dataset:
    """The description of `name`; ValueError naming it and the known datasets."""
    found = datasets().get(name)
    if found is None:
        raise ValueError(f"unknown dataset {name!r}: expected one of {', '.join(dataset_names())}")
    return found
