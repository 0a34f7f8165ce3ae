"""selection.json: the selected problems, each with its identity, category and step layout (the one source of
its step ids and of which steps are scored, for every stage after select)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from stages.benchmark.categories import UNCLASSIFIED, Category, category_of
from stages.benchmark.datasets import DEFAULT_DATASET
from stages.records.stamp import Stamp
from stages.storage.artifacts import read_typed
from stages.storage.json_values import (
    FrozenObject,
    JSONObject,
    JSONValue,
    flag,
    integer,
    objects,
    optional_text,
    text,
    texts,
)

KIND = "selection"


@dataclass(frozen=True)
class LayoutStep:
    """One step of a selected problem, in problem order: scored, or prefilled (official code, not scored)."""

    step_id: str
    prefilled: bool

    def to_record(self) -> JSONObject:
        return {"step_id": self.step_id, "prefilled": self.prefilled}


StepLayout = tuple[LayoutStep, ...]


def layout_of(records: Iterable[FrozenObject]) -> StepLayout:
    return tuple(LayoutStep(text(step.get("step_id")), flag(step.get("prefilled"))) for step in records)


@dataclass(frozen=True)
class SelectionEntry:
    """A selected problem as selection.json records it. `field`/`subfield` are None in entries written before
    they were recorded (`taxonomy` then falls back to the entry's category, else the table)."""

    problem_id: str
    split: str
    category: str
    taxonomy: Category
    fingerprint: str
    steps: int
    scored_steps: int
    layout: StepLayout
    field: str | None = None
    subfield: str | None = None

    @property
    def skipped_steps(self) -> int:
        return self.steps - self.scored_steps

    @property
    def scored_step_ids(self) -> tuple[str, ...]:
        return tuple(step.step_id for step in self.layout if not step.prefilled)

    @classmethod
    def from_record(cls, entry: FrozenObject) -> SelectionEntry:
        problem_id = text(entry.get("problem_id"))
        category = text(entry.get("category"))
        field, subfield = optional_text(entry.get("field")), optional_text(entry.get("subfield"))
        stated = {"field": field, "subfield": subfield, "category": category if category != UNCLASSIFIED else None}
        return cls(
            problem_id,
            text(entry.get("split")),
            category,
            category_of(problem_id, stated),
            text(entry.get("fingerprint")),
            integer(entry.get("steps")),
            integer(entry.get("scored_steps")),
            layout_of(objects(entry.get("layout"))),
            field,
            subfield,
        )

    def to_record(self) -> JSONObject:
        record: JSONObject = {"problem_id": self.problem_id, "category": self.category}
        if self.field is not None or self.subfield is not None:
            record |= {"field": self.field, "subfield": self.subfield}
        layout: list[JSONValue] = [step.to_record() for step in self.layout]
        return record | {
            "fingerprint": self.fingerprint,
            "split": self.split,
            "steps": self.steps,
            "scored_steps": self.scored_steps,
            "layout": layout,
        }


def dataset_fields(dataset: str, problems_md5: str | None) -> JSONObject:
    """A record's dataset fields: none for the original (records written before datasets existed read back as they
    were), else the dataset and the md5 its manifest states for the problem file."""
    if dataset == DEFAULT_DATASET and problems_md5 is None:
        return {}
    return {"dataset": dataset, "problems_md5": problems_md5}


@dataclass(frozen=True)
class Selection:
    fingerprint: str
    split: str
    category: tuple[str, ...]
    sample_ids: tuple[str, ...]
    entries: tuple[SelectionEntry, ...]
    stamp: Stamp | None = None  # None only for a selection built in memory, never written
    status: str = "complete"
    dataset: str = DEFAULT_DATASET  # a selection written before datasets existed is of the original
    problems_md5: str | None = None  # a manifest-bound dataset: the md5 its manifest states for the problem file

    @classmethod
    def from_record(cls, record: FrozenObject) -> Selection:
        return cls(
            text(record.get("fingerprint")),
            text(record.get("split")),
            texts(record.get("category")),
            texts(record.get("sample_ids")),
            tuple(SelectionEntry.from_record(entry) for entry in objects(record.get("problems"))),
            Stamp.from_record(record),
            text(record.get("status"), "complete"),
            text(record.get("dataset"), DEFAULT_DATASET),
            optional_text(record.get("problems_md5")),
        )

    def to_record(self) -> JSONObject:
        stamp = self.stamp or Stamp(self.fingerprint)
        problems: list[JSONValue] = [entry.to_record() for entry in self.entries]
        category: list[JSONValue] = list(self.category)
        sample_ids: list[JSONValue] = list(self.sample_ids)
        return stamp.to_record() | {
            "status": self.status,
            **dataset_fields(self.dataset, self.problems_md5),
            "split": self.split,
            "category": category,
            "sample_ids": sample_ids,
            "problems": problems,
        }

    @property
    def by_id(self) -> dict[str, SelectionEntry]:
        return {entry.problem_id: entry for entry in self.entries}


def read_selection_file(path: Path) -> Selection | None:
    """The selection at `path` (parsed once per file version in this process); None when missing or invalid."""
    return read_typed(path, KIND, Selection.from_record)
