"""selection.json: the selected problems, each with its identity, category and step layout (the one source of
its step ids and of which steps are scored, for every stage after select)."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dataclass_field
from functools import cached_property
from pathlib import Path

from stages.benchmark.categories import UNCLASSIFIED, Category, category_of
from stages.benchmark.datasets import DEFAULT_DATASET
from stages.config.settings import SPLITS
from stages.records.declared import Declared, key
from stages.records.schema_of import ref
from stages.records.stamp import Stamp
from stages.storage.artifacts import read_typed
from stages.storage.json_values import JSONObject

KIND = "selection"


@dataclass(frozen=True)
class LayoutStep(Declared):
    """One step of a selected problem, in problem order: scored, or prefilled (official code, not scored)."""

    record_schema = {"additionalProperties": False}

    step_id: str = dataclass_field(metadata=key(schema={"minLength": 1}))
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

    record_schema = {"additionalProperties": False}

    problem_id: str
    category: str = dataclass_field(
        metadata=key(
            schema={
                "description": "Field / Subfield (stages/benchmark/categories.json, unless the problem file states one)"
            }
        )
    )
    # Written as a pair: both set, or both left out (never null).
    field: str | None = dataclass_field(default=None, metadata=key(omit=_without_taxonomy, schema={"type": "string"}))
    subfield: str | None = dataclass_field(
        default=None, metadata=key(omit=_without_taxonomy, schema={"type": "string"})
    )
    fingerprint: str = dataclass_field(metadata=key(schema=ref("sha256")))
    split: str = dataclass_field(metadata=key(schema={"enum": ["validation", "test"]}))
    steps: int = dataclass_field(metadata=key(schema={"minimum": 1}))
    scored_steps: int = dataclass_field(metadata=key(schema={"minimum": 0}))
    layout: StepLayout = dataclass_field(
        metadata=key(
            schema={
                "description": "every step of the problem in order; prefilled steps carry official code and are not "
                "scored",
                "minItems": 1,
            }
        )
    )

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
    record_schema = {"title": "selection: the ordered problems of one run"}

    stamp: Stamp = dataclass_field(metadata=key(flatten=True))
    status: str = dataclass_field(default="complete", metadata=key(schema={"enum": ["complete"]}))
    dataset: str = dataclass_field(
        default=DEFAULT_DATASET,
        metadata=key(
            omit=_of_the_original,
            schema={"description": "the dataset (stages/benchmark/datasets.json); absent: original"},
        ),
    )
    problems_md5: str | None = dataclass_field(
        default=None,
        metadata=key(
            omit=_of_the_original,
            schema={"description": "a manifest-bound dataset: the md5 its manifest states for the problem file"},
        ),
    )
    split: str = dataclass_field(metadata=key(schema={"enum": list(SPLITS)}))
    category: tuple[str, ...] = dataclass_field(metadata=key(schema={"minItems": 1}))
    sample_ids: tuple[str, ...]
    entries: tuple[SelectionEntry, ...] = dataclass_field(metadata=key("problems", schema={"minItems": 1}))

    @property
    def fingerprint(self) -> str:
        return self.stamp.fingerprint

    @property
    def by_id(self) -> dict[str, SelectionEntry]:
        return {entry.problem_id: entry for entry in self.entries}


def read_selection_file(path: Path) -> Selection | None:
    """The selection at `path` (parsed once per file version in this process); None when missing or invalid."""
    return read_typed(path, KIND, Selection.from_record)
