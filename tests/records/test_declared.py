"""Records declared once: the JSON form read and written from the fields' declarations."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Literal

import pytest

from stages.records.declared import Declared, OneOf, key, one_of
from stages.storage.json_values import Frozen, FrozenObject, freeze, freeze_object


@dataclass(frozen=True)
class Part(Declared):
    name: str
    size: int = 7


Parts = tuple[Part, ...]


def _no_note(record: Whole) -> bool:
    return record.note is None and record.extra is None


@dataclass(frozen=True, kw_only=True)
class Stamped(Declared):
    fingerprint: str
    parts: FrozenObject | None = field(default=None, metadata=key("fingerprint_parts", omit="if_none"))


@dataclass(frozen=True, kw_only=True)
class Whole(Declared):
    stamp: Stamped = field(metadata=key(flatten=True))
    status: str = "complete"
    note: str | None = field(default=None, metadata=key(omit=_no_note))
    extra: int | None = field(default=None, metadata=key(omit=_no_note))
    ratio: float
    ok: bool
    tags: tuple[str, ...] = ()
    items: Parts = field(default=(), metadata=key("parts", omit="if_empty"))
    best: Part | None = None
    free: Frozen = None


def test_a_record_round_trips_with_its_keys_in_the_declared_order() -> None:
    record = {
        "fingerprint": "f",
        "fingerprint_parts": {"a": [1, 2]},
        "status": "partial",
        "note": "n",
        "extra": None,
        "ratio": 0.5,
        "ok": True,
        "tags": ["x", "y"],
        "parts": [{"name": "p", "size": 3}],
        "best": {"name": "b", "size": 1},
        "free": {"any": ["shape", 1, None]},
    }
    whole = Whole.from_record(freeze_object(record))
    assert whole.items == (Part("p", 3),) and whole.best == Part("b", 1) and whole.tags == ("x", "y")
    assert whole.stamp.fingerprint == "f" and whole.note == "n"
    written = whole.to_record()
    assert written == record and list(written) == list(record)


def test_left_out_keys_read_as_the_field_defaults_and_are_omitted_as_declared() -> None:
    whole = Whole.from_record(freeze_object({"fingerprint": "f", "ratio": 1, "ok": False}))
    assert whole.status == "complete" and whole.items == () and whole.best is None and whole.free is None
    assert whole.to_record() == {
        "fingerprint": "f",
        "status": "complete",
        "ratio": 1.0,
        "ok": False,
        "tags": [],
        "best": None,
        "free": None,
    }


@pytest.mark.parametrize(
    "hostile",
    [
        {
            "fingerprint": 3,
            "ratio": "x",
            "ok": None,
            "tags": "abc",
            "parts": [1, "a", None],
            "best": [1],
            "extra": True,
        },
        {"fingerprint": {"a": 1}, "ratio": [], "parts": {"name": "p"}, "best": "b", "extra": 1.5},
    ],
)
def test_ill_typed_keys_read_as_defaults_without_raising(hostile: dict[str, object]) -> None:
    whole = Whole.from_record(freeze_object(hostile))
    assert whole.ratio == 0.0 and whole.items == () and whole.best is None and whole.extra is None
    assert isinstance(whole.stamp.fingerprint, str)
    Whole.from_record(freeze_object(freeze(whole.to_record())))  # what it writes reads back


def test_an_annotation_with_no_reading_is_refused_naming_the_field() -> None:
    @dataclass(frozen=True)
    class Odd(Declared):
        when: complex

    with pytest.raises(TypeError, match=r"Odd.when: no reading of the annotation 'complex'"):
        Odd.from_record(freeze_object({}))


Colour = Literal["red", "green", "unknown"]
COLOURS: tuple[Colour, ...] = ("red", "green", "unknown")


def _rounded(value: float) -> float:
    return round(value, 1)


@dataclass(frozen=True, kw_only=True)
class Nested(Declared):
    name: str
    colour: Colour = field(metadata=key(read=one_of(COLOURS, "unknown")))
    total: int = field(default=0, metadata=key(within="tests"))
    passed: int = field(default=0, metadata=key(within="tests"))
    seconds: float = field(default=0.0, metadata=key("duration_s", write=_rounded))
    low: float | None = field(default=None, metadata=key(within="interval"))
    high: float | None = field(default=None, metadata=key(within="interval"))


def test_keys_within_an_object_are_read_from_it_and_written_into_it_where_the_first_stands() -> None:
    record = {
        "name": "n",
        "colour": "green",
        "tests": {"total": 3, "passed": 2},
        "duration_s": 1.25,
        "interval": {"low": 0.1, "high": None},
    }
    nested = Nested.from_record(freeze_object(record))
    assert (nested.total, nested.passed, nested.low, nested.high) == (3, 2, 0.1, None)
    written = nested.to_record()
    assert list(written) == ["name", "colour", "tests", "duration_s", "interval"]
    assert written["tests"] == {"total": 3, "passed": 2} and written["duration_s"] == 1.2


@pytest.mark.parametrize("tests", [None, "x", [1, 2], {"total": "3", "passed": True}])
def test_a_missing_or_ill_typed_holder_reads_as_the_fields_defaults(tests: object) -> None:
    nested = Nested.from_record(freeze_object({"name": "n", "tests": tests, "colour": "purple"}))
    assert (nested.total, nested.passed, nested.colour) == (0, 0, "unknown")


@pytest.mark.parametrize("colour", [None, 3, "Red", ["red"], {"red": 1}])
def test_a_word_outside_the_vocabulary_reads_as_the_declared_unknown_and_is_written_as_is(colour: object) -> None:
    nested = Nested.from_record(freeze_object({"colour": colour}))
    assert nested.colour == "unknown" and nested.to_record()["colour"] == "unknown"
    assert Nested.from_record(freeze_object({"colour": "red"})).to_record()["colour"] == "red"


@dataclass(frozen=True)
class Ranged(Declared):
    low: int
    high: int
    width: int = field(init=False)  # derived: written after the ends, never read
    note: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "width", self.high - self.low)


def test_a_derived_field_is_written_in_its_place_and_never_read() -> None:
    ranged = Ranged.from_record(freeze_object({"low": 2, "high": 5, "width": 99, "note": "n"}))
    assert ranged == Ranged(2, 5, "n") and ranged.width == 3
    written = ranged.to_record()
    assert list(written.items()) == [("low", 2), ("high", 5), ("width", 3), ("note", "n")]


Shade = Literal["light", "dark"]


@dataclass(frozen=True)
class Painted(Declared):
    shade: Shade


def test_a_named_literal_reads_and_writes_as_text() -> None:
    assert Painted.from_record(freeze_object({"shade": "dark"})).to_record() == {"shade": "dark"}


@dataclass(frozen=True)
class Catalogue(Declared):
    counts: Mapping[str, int]
    parts: Mapping[str, Part]


def test_a_mapping_reads_each_value_in_order_and_leaves_out_what_is_not_a_record() -> None:
    record = {"counts": {"b": 2, "a": "x"}, "parts": {"q": {"name": "q"}, "bad": 3, "p": {"name": "p", "size": 1}}}
    catalogue = Catalogue.from_record(freeze_object(record))
    assert dict(catalogue.counts) == {"b": 2, "a": 0} and list(catalogue.parts) == ["q", "p"]
    assert catalogue.parts["q"] == Part("q") and catalogue.to_record()["parts"] == {
        "q": {"name": "q", "size": 7},
        "p": {"name": "p", "size": 1},
    }
    assert Catalogue.from_record(freeze_object({"counts": [1], "parts": None})) == Catalogue({}, {})


@dataclass(frozen=True, kw_only=True)
class Held(Declared):
    place: int = field(default=-1, metadata=key(outside=True))
    turns: tuple[FrozenObject, ...] = ()


def test_a_field_outside_the_record_is_neither_read_nor_written() -> None:
    held = Held.from_record(freeze_object({"place": 4, "turns": [{"a": 1}, 2, None, {}]}))
    assert held.place == -1 and held.turns == ({"a": 1}, {})
    assert Held(place=3, turns=held.turns).to_record() == {"turns": [{"a": 1}, {}]}


def test_a_field_outside_the_record_without_a_default_is_refused() -> None:
    @dataclass(frozen=True)
    class Unplaced(Declared):
        place: int = field(metadata=key(outside=True))

    with pytest.raises(TypeError, match=r"Unplaced.place: a field outside the record needs a default"):
        Unplaced.from_record(freeze_object({}))


@dataclass(frozen=True)
class Method(Declared):
    name: str = field(default="new", metadata=key(absent="old", omit="if_default"))


@pytest.mark.parametrize("stored", [{}, {"name": None}])
def test_a_key_written_before_it_existed_reads_as_its_declared_absent_value(stored: dict[str, object]) -> None:
    assert Method.from_record(freeze_object(stored)) == Method("old")
    assert Method().to_record() == {} and Method("old").to_record() == {"name": "old"}


def test_a_vocabulary_reader_shows_its_words_to_what_describes_the_record() -> None:
    colour = next(item for item in fields(Nested) if item.name == "colour")
    assert colour.metadata["record"].read == OneOf(COLOURS, "unknown")


def test_a_key_declared_both_as_a_value_and_as_the_holder_of_other_keys_is_refused() -> None:
    @dataclass(frozen=True)
    class Clash(Declared):
        tests: int = 1
        total: int = field(default=2, metadata=key(within="tests"))

    with pytest.raises(TypeError, match=r"the key 'tests' holds both a value and the keys of other fields"):
        Clash().to_record()
