"""A declared record's JSON schema, derived from its fields' annotations and their `key(schema=...)`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import jsonschema
import pytest

from stages.records.declared import Declared, key, one_of
from stages.records.schema_of import annotation_schema, artifact_schema, ref, schema_of
from stages.storage.json_values import Frozen, FrozenObject, JSONValue, freeze_object

Colour = Literal["red", "green"]


@dataclass(frozen=True)
class Leaf(Declared):
    record_schema = {"additionalProperties": False}

    name: str = field(metadata=key(schema={"minLength": 1, "description": "a name"}))
    size: int = 7


Leaves = tuple[Leaf, ...]


@dataclass(frozen=True)
class Stamped(Declared):
    fingerprint: str = field(metadata=key(schema=ref("sha256")))
    parts: FrozenObject | None = field(default=None, metadata=key("fingerprint_parts", omit="if_none"))


def _never(record: Whole) -> bool:
    return record.note is None


@dataclass(frozen=True, kw_only=True)
class Whole(Declared):
    record_schema = {"title": "whole: every kind of field", "properties": {"fingerprint": {"description": "spread"}}}

    stamp: Stamped = field(metadata=key(flatten=True))
    colour: Colour
    mode: Literal["naive", "tool_use"] = "naive"
    note: str | None = field(default=None, metadata=key(omit=_never))
    ratio: float
    ok: bool
    count: int | None = None
    tags: tuple[str, ...] = ()
    items: Leaves = field(default=(), metadata=key("leaves", omit="if_empty"))
    best: Leaf | None = None
    sizes: Mapping[str, int] = field(default_factory=dict)
    free: Frozen = None
    legacy: int = field(default=0, metadata=key(required=False))


WHOLE_SCHEMA = {
    "title": "whole: every kind of field",
    "type": "object",
    "required": ["fingerprint", "colour", "mode", "ratio", "ok", "count", "tags", "best", "sizes", "free"],
    "properties": {
        "fingerprint": {"$ref": "common.schema.json#/$defs/sha256", "description": "spread"},
        "fingerprint_parts": {"type": "object"},
        "colour": {"enum": ["red", "green"]},
        "mode": {"enum": ["naive", "tool_use"]},
        "note": {"type": ["string", "null"]},
        "ratio": {"type": "number"},
        "ok": {"type": "boolean"},
        "count": {"type": ["integer", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "leaves": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "size"],
                "additionalProperties": False,
                "properties": {
                    "name": {"description": "a name", "type": "string", "minLength": 1},
                    "size": {"type": "integer"},
                },
            },
        },
        "best": {
            "type": ["object", "null"],
            "required": ["name", "size"],
            "additionalProperties": False,
            "properties": {
                "name": {"description": "a name", "type": "string", "minLength": 1},
                "size": {"type": "integer"},
            },
        },
        "sizes": {"type": "object", "additionalProperties": {"type": "integer"}},
        "free": {},
        "legacy": {"type": "integer"},
    },
}


def test_each_annotation_gives_its_schema_and_the_keys_always_written_are_required() -> None:
    assert schema_of(Whole) == WHOLE_SCHEMA
    assert list(schema_of(Whole)) == ["title", "type", "required", "properties"]


@dataclass(frozen=True, kw_only=True)
class Written(Declared):
    """The kinds `from_record`/`to_record` read and write, to check the schema against what is written."""

    stamp: Stamped = field(metadata=key(flatten=True))
    colour: Literal["red", "green"]
    ratio: float
    ok: bool
    count: int | None = None
    tags: tuple[str, ...] = ()
    items: Leaves = field(default=(), metadata=key("leaves", omit="if_empty"))
    best: Leaf | None = None


def test_what_a_record_writes_validates_against_its_schema_and_ill_typed_values_do_not() -> None:
    schema: dict[str, Any] = schema_of(Written)
    schema["properties"]["fingerprint"] = {"type": "string"}  # no registry of common.schema.json here
    validator = jsonschema.Draft202012Validator(schema)
    written = Written(stamp=Stamped("f"), colour="red", ratio=0.5, ok=True, items=(Leaf("a", 2),), best=Leaf("b"))
    record = written.to_record()
    assert validator.is_valid(record)
    for name, bad in [("colour", "blue"), ("ok", 1), ("count", 1.5), ("leaves", [{"name": ""}]), ("tags", "a")]:
        assert not validator.is_valid({**record, name: bad}), name
    extra: dict[str, Any] = {"name": "b", "size": 1, "extra": 0}
    assert not validator.is_valid({**record, "best": extra})
    assert not validator.is_valid({name: value for name, value in record.items() if name != "ok"})


def test_a_key_left_out_rather_than_written_null_is_never_null_in_the_schema() -> None:
    stamped: dict[str, Any] = schema_of(Stamped)
    assert stamped["properties"]["fingerprint_parts"] == {"type": "object"}
    assert annotation_schema("int | None", {}, "here") == {"type": ["integer", "null"]}
    assert annotation_schema("int | None", {}, "here", never_null=True) == {"type": "integer"}
    assert annotation_schema("Literal['a'] | None", {}, "here") == {"enum": ["a", None]}


def test_an_artifact_schema_puts_the_schema_version_first() -> None:
    schema: dict[str, Any] = artifact_schema(Stamped)
    assert list(schema) == ["$schema", "type", "required", "properties"]
    assert schema["required"] == ["schema_version", "fingerprint"]
    assert list(schema["properties"])[:2] == ["schema_version", "fingerprint"]
    assert schema["properties"]["schema_version"] == ref("schema_version")


def test_a_field_with_its_own_writer_needs_its_schema_declared() -> None:
    @dataclass(frozen=True)
    class Own(Declared):
        when: complex = field(metadata=key(read=lambda value: 0j, write=lambda value: str(value)))

    with pytest.raises(TypeError, match=r"Own.when: its own writer writes a shape no annotation states"):
        schema_of(Own)

    @dataclass(frozen=True)
    class Stated(Declared):
        when: complex = field(
            metadata=key(read=lambda value: 0j, write=lambda value: str(value), schema={"type": "string"})
        )

    assert schema_of(Stated)["properties"] == {"when": {"type": "string"}}
    assert Stated.from_record(freeze_object({})).to_record() == {"when": "0j"}


def test_an_annotation_with_no_schema_is_refused_naming_the_field() -> None:
    @dataclass(frozen=True)
    class Odd(Declared):
        when: set[int]

    with pytest.raises(TypeError, match=r"Odd.when: no schema of the annotation 'set\[int\]'"):
        schema_of(Odd)


def test_notes_on_a_property_the_record_does_not_have_are_refused() -> None:
    @dataclass(frozen=True)
    class Noted(Declared):
        record_schema = {"properties": {"missing": {"description": "x"}}}

        present: str

    with pytest.raises(TypeError, match=r"Noted.record_schema: no property 'missing' to annotate; its keys: present"):
        schema_of(Noted)


def _spread_record(value: Frozen) -> JSONValue:
    return {"low": 0, "high": 1}


@dataclass(frozen=True)
class Derived(Declared):
    low: int
    high: int
    width: int = field(init=False)  # written after the ends, never read
    spread: FrozenObject = field(
        default_factory=dict,
        metadata=key(
            flatten=True,
            read=lambda value: {},
            write=_spread_record,
            schema={"type": "object", "required": ["lo"], "properties": {"lo": {"type": "number"}}},
        ),
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "width", self.high - self.low)


def test_a_derived_field_is_in_the_schema_and_a_written_spread_gives_its_declared_keys() -> None:
    schema: dict[str, Any] = schema_of(Derived)
    assert schema["required"] == ["low", "high", "width", "lo"]
    assert list(schema["properties"]) == ["low", "high", "width", "lo"]

    @dataclass(frozen=True)
    class Unstated(Declared):
        spread: FrozenObject = field(metadata=key(flatten=True, read=lambda value: {}, write=_spread_record))

    with pytest.raises(TypeError, match=r"Unstated.spread: its own writer spreads keys no annotation states"):
        schema_of(Unstated)


@dataclass(frozen=True)
class Worded(Declared):
    status: str = field(metadata=key(read=one_of(("pass", "fail"), "fail")))
    place: int = field(default=0, metadata=key(outside=True))  # its container gives it


def test_a_vocabulary_field_is_an_enum_of_its_words_and_a_field_outside_the_record_is_not_in_its_schema() -> None:
    assert schema_of(Worded) == {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"enum": ["pass", "fail"]}},
    }


@dataclass(frozen=True)
class Held(Declared):
    name: str
    total: int = field(default=0, metadata=key(within="tests", schema={"minimum": 0}))
    passed: int | None = field(default=None, metadata=key(within="tests", omit="if_none"))


def test_keys_within_an_object_are_properties_of_that_object_where_its_first_key_stands() -> None:
    assert schema_of(Held) == {
        "type": "object",
        "required": ["name", "tests"],
        "properties": {
            "name": {"type": "string"},
            "tests": {
                "type": "object",
                "required": ["total"],
                "properties": {"total": {"type": "integer", "minimum": 0}, "passed": {"type": "integer"}},
            },
        },
    }
    assert Held("n", 3, 2).to_record() == {"name": "n", "tests": {"total": 3, "passed": 2}}
