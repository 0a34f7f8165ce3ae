"""Records declared once: a record's JSON form, read and written, derived from its dataclass fields.

A record is a frozen dataclass that subclasses `Declared`. Each field is one key of the record's JSON object, in
the order the fields are declared (use `kw_only=True` where a key without a default follows one with a default).
How a field is read and written follows from its annotation (the module's `from __future__ import annotations`
keeps it a string, which is what is read here):

| annotation | read from a frozen value (total: a missing or ill-typed key reads as the field's default) | written |
| --- | --- | --- |
| `str`, `int`, `float`, `bool` (a `Literal[...]` of strings, or a name for one, reads as `str`) | `text`, `integer`, `number`, `flag` | as is |
| `X | None` | None when absent or not of X's shape, else X's reading | as is |
| `tuple[X, ...]` | each item of an array read as X (objects only, for a record X or `FrozenObject`) | a list |
| `Mapping[str, X]` | each value of an object read as X (objects only, for a record X), in the object's order | an object |
| a `Declared` record | its `from_record` of the object | its `to_record` |
| `FrozenObject`, `Frozen` (free-form JSON: a trajectory, a tool's outcome) | the frozen value | `thaw` of it |

What the annotation cannot say is the field's metadata, `field(metadata=key(...))`:
- `name`: its JSON key, when it differs from the attribute's name;
- `within`: the object one level down that holds the key (consecutive fields `within="tests"` write
  `"tests": {...}` where the first of them stands);
- `omit`: when the key is left out of the written record;
- `absent`: what a missing or ill-typed key reads as, when not the field's default (records written before the
  key existed);
- `outside`: a value the record does not hold but its container gives (read as the field's default, never
  written);
- `flatten`: a record whose keys are spread into this one's;
- `read`, `write`: a reader or writer of its own, for the rare value no annotation describes (a lone reader's value
  is written as is, a lone writer's read by the annotation); `one_of` reads a vocabulary, such as a status, with
  what an unknown word reads as;
- `schema`, `required`: what the field's JSON schema says beyond its type (a description, a pattern, a bound, a
  narrower enum, a `$ref`), and whether it requires the key when that is not "always written".

A record's own schema words (title, description, `additionalProperties`) are its `record_schema`;
`stages.records.schema_of` derives the schema files from all of it. A value the record derives from its other
fields and writes among them (`is_published` beside the fields it follows from) is a field declared `init=False`
and set in `__post_init__`: written in its place, never read. The readers of `stages.storage.json_values` are the
building blocks: a record read here reads exactly as the hand-written converters it replaced did.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, dataclass, fields
from types import GenericAlias, MappingProxyType
from typing import Any, ClassVar, Generic, Literal, TypeVar, get_args, get_origin

from stages.storage.json_values import (
    EMPTY,
    Frozen,
    FrozenObject,
    JSONObject,
    JSONValue,
    flag,
    integer,
    items,
    number,
    obj,
    text,
    thaw,
)

D = TypeVar("D", bound="Declared")
W = TypeVar("W", bound=str)  # a word of a vocabulary

Omit = Literal["never", "if_none", "if_empty", "if_default"]
Reader = Callable[[Frozen], Any]
Writer = Callable[[Any], JSONValue]

_METADATA_KEY = "record"
_UNDECLARED = object()  # `absent` not declared: a missing key reads as the field's default


@dataclass(frozen=True)
class KeyDeclaration:
    """What a field's annotation cannot say about its key (see the module's docstring)."""

    name: str | None = None  # the JSON key; None: the attribute's name
    omit: Omit | Callable[[Any], bool] = "never"  # a callable is given the whole record
    flatten: bool = False  # a Declared field whose keys are this record's own
    read: Reader | None = None
    write: Writer | None = None
    within: str | None = None  # the key of the object (one level down) that holds this field's key
    outside: bool = False  # not in the record: its container gives it (read as the default, not written)
    absent: object = _UNDECLARED  # what a missing or ill-typed key reads as
    schema: Mapping[str, JSONValue] | None = None  # merged into the schema the annotation gives (a `$ref`: instead)
    required: bool | None = None  # None: required when always written (omit == "never")


def key(
    name: str | None = None,
    *,
    within: str | None = None,
    omit: Omit | Callable[[Any], bool] = "never",
    flatten: bool = False,
    read: Reader | None = None,
    write: Writer | None = None,
    outside: bool = False,
    absent: object = _UNDECLARED,
    schema: Mapping[str, JSONValue] | None = None,
    required: bool | None = None,
) -> dict[str, KeyDeclaration]:
    """A field's metadata: `field(default=..., metadata=key("usage", omit="if_none"))`."""
    return {_METADATA_KEY: KeyDeclaration(name, omit, flatten, read, write, within, outside, absent, schema, required)}


def declaration_of(item: Field[Any]) -> KeyDeclaration:
    """A field's declaration (the defaults when it has no `key(...)` metadata)."""
    found = item.metadata.get(_METADATA_KEY)
    return found if isinstance(found, KeyDeclaration) else KeyDeclaration()


@dataclass(frozen=True)
class OneOf(Generic[W]):
    """The reader of a field whose value is one word of `vocabulary` (a Literal's): any other value, or none,
    reads as `unknown`. The words stay visible to what describes the record (its schema)."""

    vocabulary: tuple[W, ...]
    unknown: W

    def __call__(self, value: Frozen) -> W:
        return next((word for word in self.vocabulary if word == value), self.unknown)


def one_of(vocabulary: tuple[W, ...], unknown: W) -> OneOf[W]:
    """`key(read=one_of(STEP_STATUSES, "eval_error"))`: see `OneOf`."""
    return OneOf(vocabulary, unknown)


class Declared:
    """A record whose `from_record` and `to_record` follow from its fields' declarations."""

    __record_plan__: ClassVar[tuple[_FieldPlan, ...] | None] = None
    # What the record's JSON schema says beyond its fields: title, description, `additionalProperties`.
    record_schema: ClassVar[Mapping[str, JSONValue]] = {}

    @classmethod
    def from_record(cls: type[D], record: FrozenObject) -> D:
        """The record of a frozen JSON object (a valid artifact's, or a part of it): never raises on its shape."""
        return cls(**{plan.attribute: plan.read_from(record) for plan in _plan_of(cls) if not plan.derived})

    def to_record(self) -> JSONObject:
        """The JSON object the writer writes, keys in the fields' order."""
        record: JSONObject = {}
        for plan in _plan_of(type(self)):
            value = getattr(self, plan.attribute)
            if plan.omitted(self, value):
                continue
            written = plan.write(value)
            if plan.declaration.flatten and isinstance(written, dict):
                record |= written
            else:
                _holder(record, plan.declaration.within)[plan.key] = written
        return record


# ---------------------------------------------------------------------------
# The plan of a record class: one reader and one writer per field, made once per class
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Kind:
    """How one annotation reads and writes."""

    read: Callable[[Frozen, Any], Any]  # (value, default) -> field value
    write: Writer


@dataclass(frozen=True)
class _FieldPlan:
    attribute: str
    key: str
    default: Any  # the field's default (MISSING: none)
    absent: object  # what a missing key reads as (MISSING: the kind's own zero)
    kind: _Kind
    declaration: KeyDeclaration
    derived: bool = False  # an `init=False` field: written from the record's own value, never read

    def read_from(self, record: FrozenObject) -> Any:
        if self.declaration.outside:
            return self.default
        if self.declaration.flatten:
            return self.kind.read(record, self.absent)
        if self.declaration.within is not None:
            record = obj(record.get(self.declaration.within))
        return self.kind.read(record.get(self.key), self.absent)

    def omitted(self, owner: Declared, value: Any) -> bool:
        omit = self.declaration.omit
        if self.declaration.outside:
            return True
        if callable(omit):
            return bool(omit(owner))
        if omit == "if_none":
            return value is None
        if omit == "if_empty":
            return not value
        if omit == "if_default":
            return bool(value == self.default)
        return False

    def write(self, value: Any) -> JSONValue:
        return self.kind.write(value)


def _holder(record: JSONObject, within: str | None) -> JSONObject:
    """The object a key is written into: the record's own, or the one under `within` (made where first used)."""
    if within is None:
        return record
    inner = record.setdefault(within, {})
    if not isinstance(inner, dict):
        raise TypeError(f"the key {within!r} holds both a value and the keys of other fields")
    return inner


def _plan_of(cls: type[Declared]) -> tuple[_FieldPlan, ...]:
    plan = cls.__dict__.get("__record_plan__")
    if plan is None:
        plan = tuple(_field_plan(cls, item) for item in fields(cls))  # type: ignore[arg-type]
        cls.__record_plan__ = plan
    return plan


def _field_plan(cls: type, item: Field[Any]) -> _FieldPlan:
    declaration = declaration_of(item)
    default = item.default
    if default is MISSING and item.default_factory is not MISSING:
        default = item.default_factory()
    where = f"{cls.__name__}.{item.name}"
    if declaration.outside and default is MISSING:
        raise TypeError(f"{where}: a field outside the record needs a default")
    kind = _declared_kind(declaration, lambda: _kind_of(str(item.type), _namespace(cls), where))
    absent = default if declaration.absent is _UNDECLARED else declaration.absent
    return _FieldPlan(
        item.name, declaration.name or item.name, default, absent, kind, declaration, derived=not item.init
    )


def _declared_kind(declaration: KeyDeclaration, annotated: Callable[[], _Kind]) -> _Kind:
    """The field's own reader and writer where declared: a lone reader's value is written as is (a word, a
    number), a lone writer's value is read by its annotation."""
    reader, writer = declaration.read, declaration.write
    if reader is None:
        return annotated() if writer is None else _Kind(annotated().read, writer)
    return _Kind(lambda value, default: reader(value), writer or _as_is)


def _namespace(cls: type) -> dict[str, Any]:
    return vars(sys.modules[cls.__module__])


# ---------------------------------------------------------------------------
# Kinds by annotation
# ---------------------------------------------------------------------------


def _or(default: Any, zero: Any) -> Any:
    return zero if default is MISSING else default


def _as_is(value: Any) -> JSONValue:
    return value  # type: ignore[no-any-return]


_SCALARS: dict[str, _Kind] = {
    "str": _Kind(lambda value, default: text(value, _or(default, "")), _as_is),
    "int": _Kind(lambda value, default: integer(value, _or(default, 0)), _as_is),
    "float": _Kind(lambda value, default: number(value, _or(default, 0.0)), _as_is),
    "bool": _Kind(lambda value, default: flag(value) if value is not None else _or(default, False), _as_is),
    "FrozenObject": _Kind(lambda value, default: obj(value) if value is not None else _or(default, EMPTY), thaw),
    "Frozen": _Kind(lambda value, default: value if value is not None else _or(default, None), thaw),
}

_SHAPES: dict[str, Callable[[Frozen], bool]] = {
    "str": lambda value: value is not None,
    "int": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "float": lambda value: isinstance(value, (int, float)) and not isinstance(value, bool),
    "bool": lambda value: isinstance(value, bool),
    "FrozenObject": lambda value: isinstance(value, Mapping),
    "Frozen": lambda value: value is not None,
}

_OPTIONAL = re.compile(r"^(?P<inner>.+?)\s*\|\s*None$")
_TUPLE = re.compile(r"^tuple\[(?P<item>.+),\s*\.\.\.\]$")
_MAPPING = re.compile(r"^Mapping\[str,\s*(?P<value>.+)\]$")
_LITERAL = re.compile(r"^Literal\[.*\]$")


def _kind_of(annotation: str, namespace: Mapping[str, Any], where: str) -> _Kind:
    annotation = annotation.strip()
    alias = namespace.get(annotation)
    if isinstance(alias, GenericAlias):  # a name for `tuple[X, ...]`
        return _kind_of(_alias_text(alias), {**namespace, **_alias_names(alias)}, where)
    optional = _OPTIONAL.match(annotation)
    if optional:
        return _optional_kind(optional.group("inner"), namespace, where)
    if _LITERAL.match(annotation) or alias is str or get_origin(alias) is Literal:  # a Literal, or a name for one
        annotation = "str"
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    sequence = _TUPLE.match(annotation)
    if sequence:
        return _tuple_kind(sequence.group("item"), namespace, where)
    mapping = _MAPPING.match(annotation)
    if mapping:
        return _mapping_kind(mapping.group("value"), namespace, where)
    record = _record_class(annotation, namespace)
    if record is not None:
        return _Kind(lambda value, default: record.from_record(obj(value)), lambda value: value.to_record())
    raise TypeError(f"{where}: no reading of the annotation {annotation!r}; declare its reader and writer with key()")


def _optional_kind(inner: str, namespace: Mapping[str, Any], where: str) -> _Kind:
    kind = _kind_of(inner, namespace, where)
    inner = inner.strip()
    shape: Callable[[Frozen], bool]
    if _record_class(inner, namespace) is not None:
        shape = _is_mapping
    else:
        shape = _SHAPES.get("str" if _LITERAL.match(inner) else inner, _is_present)

    def read(value: Frozen, default: Any) -> Any:
        return kind.read(value, MISSING) if shape(value) else _or(default, None)

    return _Kind(read, lambda value: None if value is None else kind.write(value))


def _tuple_kind(item: str, namespace: Mapping[str, Any], where: str) -> _Kind:
    kind = _kind_of(item, namespace, where)
    objects_only = _record_class(item.strip(), namespace) is not None or item.strip() == "FrozenObject"

    def read(value: Frozen, default: Any) -> tuple[Any, ...]:
        values = items(value)
        if objects_only:
            return tuple(kind.read(entry, MISSING) for entry in values if isinstance(entry, Mapping))
        return tuple(kind.read(entry, MISSING) for entry in values)

    return _Kind(read, lambda value: [kind.write(entry) for entry in value])


def _mapping_kind(value_annotation: str, namespace: Mapping[str, Any], where: str) -> _Kind:
    kind = _kind_of(value_annotation, namespace, where)
    record = _record_class(value_annotation.strip(), namespace)

    def read(value: Frozen, default: Any) -> Mapping[str, Any]:
        kept = {name: entry for name, entry in obj(value).items() if record is None or isinstance(entry, Mapping)}
        return MappingProxyType({name: kind.read(entry, MISSING) for name, entry in kept.items()})

    return _Kind(read, lambda value: {name: kind.write(entry) for name, entry in value.items()})


def _record_class(annotation: str, namespace: Mapping[str, Any]) -> type[Declared] | None:
    found = namespace.get(annotation)
    return found if isinstance(found, type) and issubclass(found, Declared) else None


def _alias_text(alias: GenericAlias) -> str:
    names = ", ".join("..." if arg is Ellipsis else getattr(arg, "__name__", str(arg)) for arg in get_args(alias))
    return f"{getattr(get_origin(alias), '__name__', '')}[{names}]"


def _alias_names(alias: GenericAlias) -> dict[str, Any]:
    return {arg.__name__: arg for arg in get_args(alias) if isinstance(arg, type)}


def _is_mapping(value: Frozen) -> bool:
    return isinstance(value, Mapping)


def _is_present(value: Frozen) -> bool:
    return value is not None
