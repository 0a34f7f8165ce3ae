"""The field and subfield of every SciCode main problem, from the table shipped in categories.json.

The problem files carry no category; the table (its `source` and `about` name where it comes from) gives
each problem id one of 5 fields and one of 16 subfields. A category written in a problem record itself
(`field`/`subfield`, or a `category` naming a known field or subfield, or any other subfield name) wins
over the table. `category=` selects by field or by subfield, case-insensitively.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TypedDict

CATEGORIES_FILE = Path(__file__).with_name("categories.json")
UNCLASSIFIED = "unclassified"


@dataclass(frozen=True)
class Category:
    """Where a problem sits in SciCode's taxonomy."""

    field: str
    subfield: str

    @property
    def label(self) -> str:
        """`Physics / Optics`: the one-string form stored as `category` in selection.json and details."""
        return self.field if self.subfield == self.field else f"{self.field} / {self.subfield}"

    def matches(self, name: str) -> bool:
        """Whether a `category=` name (field, subfield or label; any case) selects this problem."""
        wanted = name.strip().casefold()
        return wanted in (self.field.casefold(), self.subfield.casefold(), self.label.casefold())


UNKNOWN_CATEGORY = Category(UNCLASSIFIED, UNCLASSIFIED)


class TableEntry(TypedDict):
    field: str
    name: str
    subfield: str


class CategoryTable(TypedDict):
    """categories.json: where the table comes from, the fields in order, and each problem's entry by id."""

    source: str
    about: str
    fields: list[str]
    problems: dict[str, TableEntry]


@lru_cache(maxsize=1)
def category_table() -> CategoryTable:
    table: CategoryTable = json.loads(CATEGORIES_FILE.read_text(encoding="utf-8"))  # this package's own file
    return table


def table_digest() -> str:
    """Identity of the shipped table (part of the selection fingerprint: a new table re-selects)."""
    from stages.storage.artifacts import fingerprint

    return fingerprint(category_table()["problems"])


def fields() -> tuple[str, ...]:
    return tuple(category_table()["fields"])


def subfields_by_field() -> dict[str, tuple[str, ...]]:
    """Field -> its subfields, fields in the table's order, subfields sorted."""
    grouped: dict[str, set[str]] = {name: set() for name in fields()}
    for entry in category_table()["problems"].values():
        grouped.setdefault(entry["field"], set()).add(entry["subfield"])
    return {name: tuple(sorted(subs)) for name, subs in grouped.items()}


def _field_of_subfield(subfield: str) -> str | None:
    return next((field for field, subs in subfields_by_field().items() if subfield in subs), None)


def _from_record(record: Mapping[str, object]) -> Category | None:
    """The category a problem record states itself, if any."""
    field, subfield = record.get("field"), record.get("subfield")
    stated = record.get("category")
    if not field and not subfield and stated:
        if stated in fields():
            field = stated
        else:
            subfield, field = stated, _field_of_subfield(str(stated))
    if not field and not subfield:
        return None
    subfield = str(subfield or field)
    return Category(str(field or _field_of_subfield(subfield) or UNCLASSIFIED), subfield)


def category_of(problem_id: str, record: Mapping[str, object] | None = None) -> Category:
    """The record's own category when it states one, else the table's; `unclassified` for an unknown id."""
    own = _from_record(record or {})
    if own is not None:
        return own
    entry = category_table()["problems"].get(str(problem_id))
    return UNKNOWN_CATEGORY if entry is None else Category(entry["field"], entry["subfield"])


def unknown_names(names: Iterable[str], known: Iterable[Category]) -> list[str]:
    """The `category=` names that select none of the table's categories nor of `known` (the data's own)."""
    everything = {Category(field, sub) for field, subs in subfields_by_field().items() for sub in subs} | set(known)
    return [name for name in names if not any(category.matches(name) for category in everything)]


def allowed_names_text(known: Iterable[Category] = ()) -> str:
    """`fields: A, B; subfields: A: x, y; B: z` for the one-line error of an unknown name."""
    grouped = {field: list(subs) for field, subs in subfields_by_field().items()}
    for category in known:
        subs = grouped.setdefault(category.field, [])
        if category.subfield not in subs and category.subfield != category.field:
            subs.append(category.subfield)
    field_text = ", ".join(grouped)
    subfield_text = "; ".join(f"{field}: {', '.join(subs)}" for field, subs in grouped.items() if subs)
    return f"fields {field_text}; subfields {subfield_text}"
