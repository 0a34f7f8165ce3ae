"""selection.json: the selected problems, each with its identity, category and step layout (the one source of
its step ids and of which steps are scored, for every stage after select)."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dataclass_field
from functools import cached_property
from pathlib import Path

from stages.benchmark.categories import UNCLASSIFIED, Category, category_of
from stages.benchmark.datasets import DEFAULT_DATASET
from stages.records.declared import Declared, key
from stages.records.stamp import Stamp
from stages.storage.artifacts import read_typed
from stages.storage.json_values import JSONObject

KIND = "selection"


@dataclass(frozen=True)
class LayoutStep(Declared):
    """One step of a selected problem, in problem order: scored, or prefilled (official code, not scored)."""

    step_id: str
    prefilled: bool


StepLayout = tuple[LayoutStep, ...]


def _without_taxonomy(entry: SelectionEntry) -> bool:
    """Entries written before the field and subfield were recorded carry neither key."""
    return entry.field is None and entry.subfield is None


def dataset_fields(dataset: str, problems_md5: str | None) -> JSONObject:
    """A record's dataset fields: none for the original (records written before datasets existed read back as they
    were), else the dataset and the md5 its manifest states for the problem file."""
    if dataset == DEFAULT_DATASET and problems_md5 is None:
        return {}
    return {"dataset": dataset, "problems_md5": problems_md5}


@dataclass(frozen=True, kw_only=True)
class SelectionEntry(Declared):
    """A selected problem as selection.json records it. `field`/`subfield` are None in entries written before
    they were recorded (`taxonomy` then falls back to the entry's category, else the table)."""

    problem_id: str
    category: str
    field: str | None = dataclass_field(default=None, metadata=key(omit=_without_taxonomy))
    subfield: str | None = dataclass_field(default=None, metadata=key(omit=_without_taxonomy))
    fingerprint: str
    split: str
    steps: int
    scored_steps: int
    layout: StepLayout

    @cached_property
    def taxonomy(self) -> Category:
        stated = {
            "field": self.field,
            "subfield": self.subfield,
            "category": self.category if self.category != UNCLASSIFIED else None,
        }
        return category_of(self.problem_id, stated)

    @property
    def skipped_steps(self) -> int:
        return self.steps - self.scored_steps

    @property
    def scored_step_ids(self) -> tuple[str, ...]:
        return tuple(step.step_id for step in self.layout if not step.prefilled)


def _of_the_original(selection: Selection) -> bool:
    """Records of the original dataset written before datasets existed carry no dataset keys (and read back so)."""
    return selection.dataset == DEFAULT_DATASET and selection.problems_md5 is None


@dataclass(frozen=True, kw_only=True)
class Selection(Declared):
    stamp: Stamp = dataclass_field(metadata=key(flatten=True))
    status: str = "complete"
    dataset: str = dataclass_field(default=DEFAULT_DATASET, metadata=key(omit=_of_the_original))
    problems_md5: str | None = dataclass_field(default=None, metadata=key(omit=_of_the_original))
    split: str
    category: tuple[str, ...]
    sample_ids: tuple[str, ...]
    entries: tuple[SelectionEntry, ...] = dataclass_field(metadata=key("problems"))

    @property
    def fingerprint(self) -> str:
        return self.stamp.fingerprint

    @property
    def by_id(self) -> dict[str, SelectionEntry]:
        return {entry.problem_id: entry for entry in self.entries}


def read_selection_file(path: Path) -> Selection | None:
    """The selection at `path` (parsed once per file version in this process); None when missing or invalid."""
    return read_typed(path, KIND, Selection.from_record)
