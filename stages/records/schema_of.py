"""The JSON schema of a declared record, derived from the same declarations as its reader and writer.

A field's annotation gives its schema (`stages.records.declared` reads the same annotations):

| annotation | schema |
| --- | --- |
| `str`, `int`, `float`, `bool` | `{"type": "string" / "integer" / "number" / "boolean"}` |
| `Literal["a", "b"]` (or a name for one) | `{"enum": ["a", "b"]}` |
| `X | None` | X's, or null (only X when the key is left out rather than written null: `omit="if_none"`) |
| `tuple[X, ...]` | `{"type": "array", "items": X's}` |
| `Mapping[str, X]`, `dict[str, X]` | `{"type": "object", "additionalProperties": X's}` |
| a `Declared` record | its object: `properties` in field order, `required` the keys always written |
| `FrozenObject`; `Frozen` (free-form JSON) | `{"type": "object"}`; `{}` |

What a type cannot say is the field's `key(schema=...)`, merged over what the annotation gives (a `$ref` in it
stands instead of the annotation's schema: the definition it names says the type), and `key(required=...)` where
the schema's `required` is not "the keys always written". A field with a writer of its own writes a shape no
annotation states: its `key(schema=...)` is its whole schema. A field read by `one_of` is one of its words (an
enum); a field `outside` the record is not in its schema. A record's `record_schema` (title, description,
`additionalProperties`; `properties`: words merged into named properties, e.g. a spread record's) goes into its object. `artifact_schema` is the schema file of an artifact: its record
with the `schema_version` every artifact carries (`stages.storage.artifacts.write_artifact` adds it).
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Mapping
from dataclasses import Field, fields
from types import GenericAlias
from typing import Any, Literal, get_args, get_origin

from stages.records.declared import Declared, KeyDeclaration, OneOf, declaration_of
from stages.storage.artifacts import COMMON_SCHEMA
from stages.storage.json_values import JSONObject, JSONValue

DRAFT = "https://json-schema.org/draft/2020-12/schema"
# The words of an object's schema, in the order a schema file shows them (anything else follows, then properties).
LEADING_WORDS = ("title", "description", "type", "required", "additionalProperties")

_SCALARS: dict[str, JSONObject] = {
    "str": {"type": "string"},
    "int": {"type": "integer"},
    "float": {"type": "number"},
    "bool": {"type": "boolean"},
    "FrozenObject": {"type": "object"},
    "JSONObject": {"type": "object"},
    "Frozen": {},
    "JSONValue": {},
}

_OPTIONAL = re.compile(r"^(?P<inner>.+?)\s*\|\s*None$")
_TUPLE = re.compile(r"^tuple\[(?P<item>.+),\s*\.\.\.\]$")
_MAPPING = re.compile(r"^(?:Mapping|dict)\[str,\s*(?P<value>.+)\]$")
_LITERAL = re.compile(r"^Literal\[(?P<values>.*)\]$")


def ref(definition: str) -> JSONObject:
    """A `$ref` to one of the definitions every artifact schema shares (`schemas/common.schema.json`)."""
    return {"$ref": f"{COMMON_SCHEMA}#/$defs/{definition}"}


def schema_of(record: type[Declared]) -> JSONObject:
    """The schema of the JSON object `record` writes."""
    properties: JSONObject = {}
    required: list[JSONValue] = []
    for item in fields(record):  # type: ignore[arg-type]
        declaration = declaration_of(item)
        if declaration.outside:  # its container gives it: never in the record
            continue
        where = f"{record.__name__}.{item.name}"
        if declaration.flatten:
            spread = _flattened(record, item, where)
            properties.update(_object_words(spread, "properties"))
            required.extend(_listed(spread, "required") if _required(declaration) else [])
            continue
        name = declaration.name or item.name
        holder_properties, holder_required = _holder(properties, required, declaration.within)
        holder_properties[name] = field_schema(record, item)
        if _required(declaration):
            holder_required.append(name)
    words = dict(record.record_schema)
    _annotate(properties, words.pop("properties", {}), record.__name__)
    return _ordered({"type": "object", "required": required, **words, "properties": properties})


def _holder(
    properties: JSONObject, required: list[JSONValue], within: str | None
) -> tuple[JSONObject, list[JSONValue]]:
    """Where a key's schema goes: the record's own properties, or those of the object under `within` (an object
    always written, made where its first key stands)."""
    if within is None:
        return properties, required
    if within not in properties:
        properties[within] = {"type": "object", "required": [], "properties": {}}
        required.append(within)
    holder = properties[within]
    assert isinstance(holder, dict)
    inner_properties, inner_required = holder["properties"], holder["required"]
    assert isinstance(inner_properties, dict) and isinstance(inner_required, list)
    return inner_properties, inner_required


def _annotate(properties: JSONObject, notes: JSONValue, where: str) -> None:
    """Merge a record's notes on its properties (e.g. a description of a key a spread record gives it)."""
    for name, words in (notes if isinstance(notes, dict) else {}).items():
        found = properties.get(name)
        if not isinstance(found, dict) or not isinstance(words, dict):
            raise TypeError(
                f"{where}.record_schema: no property {name!r} to annotate; its keys: {', '.join(properties)}"
            )
        properties[name] = {**found, **words}


def field_schema(record: type[Declared], item: Field[Any]) -> JSONObject:
    """The schema of one field's value as the record writes it."""
    declaration = declaration_of(item)
    where = f"{record.__name__}.{item.name}"
    stated = dict(declaration.schema or {})
    if "$ref" in stated:
        return stated
    if declaration.write is not None:
        if not stated:
            raise TypeError(f"{where}: its own writer writes a shape no annotation states; declare key(schema=...)")
        return stated
    never_null = declaration.omit == "if_none"
    given = annotation_schema(str(item.type), _namespace(record), where, never_null=never_null)
    if isinstance(declaration.read, OneOf):  # a vocabulary's words, read as is and written as read
        given = {"enum": list(declaration.read.vocabulary)}
    described = {"description": stated.pop("description")} if "description" in stated else {}
    return {**described, **given, **stated}


def artifact_schema(record: type[Declared]) -> JSONObject:
    """The schema file of an artifact whose record is `record`: the record's object with `schema_version` first."""
    body = schema_of(record)
    required = _listed(body, "required")
    properties = _object_words(body, "properties")
    return {
        "$schema": DRAFT,
        **body,
        "required": ["schema_version", *required],
        "properties": {"schema_version": ref("schema_version"), **properties},
    }


def annotation_schema(
    annotation: str, namespace: Mapping[str, Any], where: str, *, never_null: bool = False
) -> JSONObject:
    """The schema of a value of `annotation` (a string, as `from __future__ import annotations` keeps it)."""
    annotation = annotation.strip()
    named = namespace.get(annotation)
    if isinstance(named, GenericAlias) or get_origin(named) is Literal:
        return _alias_schema(named, namespace, where, never_null=never_null)
    optional = _OPTIONAL.match(annotation)
    if optional:
        inner = annotation_schema(optional.group("inner"), namespace, where)
        return inner if never_null else _or_null(inner)
    if named is str:
        return dict(_SCALARS["str"])
    if annotation in _SCALARS:
        return dict(_SCALARS[annotation])
    return _composite_schema(annotation, namespace, where)


def _composite_schema(annotation: str, namespace: Mapping[str, Any], where: str) -> JSONObject:
    literal = _LITERAL.match(annotation)
    if literal:
        return {"enum": list(ast.literal_eval(f"[{literal.group('values')}]"))}
    sequence = _TUPLE.match(annotation)
    if sequence:
        return {"type": "array", "items": annotation_schema(sequence.group("item"), namespace, where)}
    mapping = _MAPPING.match(annotation)
    if mapping:
        values = annotation_schema(mapping.group("value"), namespace, where)
        return {"type": "object", **({"additionalProperties": values} if values else {})}
    named = namespace.get(annotation)
    if isinstance(named, type) and issubclass(named, Declared):
        return schema_of(named)
    raise TypeError(f"{where}: no schema of the annotation {annotation!r}; declare it with key(schema=...)")


def _alias_schema(alias: Any, namespace: Mapping[str, Any], where: str, *, never_null: bool) -> JSONObject:
    """A module-level name for `tuple[X, ...]` or `Literal[...]`."""
    if get_origin(alias) is Literal:
        return {"enum": list(get_args(alias))}
    names = {arg.__name__: arg for arg in get_args(alias) if isinstance(arg, type)}
    words = ", ".join("..." if arg is Ellipsis else getattr(arg, "__name__", str(arg)) for arg in get_args(alias))
    text = f"{getattr(get_origin(alias), '__name__', '')}[{words}]"
    return annotation_schema(text, {**namespace, **names}, where, never_null=never_null)


def _or_null(schema: JSONObject) -> JSONObject:
    """`schema`, or null."""
    kind = schema.get("type")
    if isinstance(kind, str):
        return {**schema, "type": [kind, "null"]}
    if isinstance(schema.get("enum"), list) and None not in schema["enum"]:  # type: ignore[operator]
        return {**schema, "enum": [*schema["enum"], None]}  # type: ignore[misc]
    if not schema:
        return schema
    return {"anyOf": [schema, {"type": "null"}]}


def _flattened(record: type[Declared], item: Field[Any], where: str) -> JSONObject:
    """The object schema whose properties a spread field gives: its record's, or the one its writer's is declared."""
    declaration = declaration_of(item)
    if declaration.schema:  # the keys it spreads, as declared (e.g. a record's keys but one)
        return dict(declaration.schema)
    if declaration.write is not None:
        raise TypeError(f"{where}: its own writer spreads keys no annotation states; declare key(schema=...)")
    spread = _namespace(record).get(str(item.type).strip())
    if not (isinstance(spread, type) and issubclass(spread, Declared)):
        raise TypeError(f"{where}: only a record's keys can be spread into another's (flatten=True)")
    return schema_of(spread)


def _required(declaration: KeyDeclaration) -> bool:
    if declaration.required is not None:
        return declaration.required
    return declaration.omit == "never"


def _ordered(schema: JSONObject) -> JSONObject:
    """The words of an object's schema in the order of LEADING_WORDS, then the others, `properties` last."""
    leading = {word: schema[word] for word in LEADING_WORDS if word in schema}
    others = {word: value for word, value in schema.items() if word not in leading and word != "properties"}
    return {**leading, **others, "properties": schema["properties"]}


def _object_words(schema: JSONObject, word: str) -> JSONObject:
    found = schema.get(word)
    return found if isinstance(found, dict) else {}


def _listed(schema: JSONObject, word: str) -> list[JSONValue]:
    found = schema.get(word)
    return list(found) if isinstance(found, list) else []


def _namespace(record: type) -> Mapping[str, Any]:
    return vars(sys.modules[record.__module__])
