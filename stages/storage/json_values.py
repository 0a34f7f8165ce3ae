"""JSON values, their deeply immutable form, and total readers of typed fields out of them.

An artifact is parsed once per process and shared by every reader (`stages.storage.store`), so what is
shared must not change under them: objects become read-only mappings and arrays tuples (`freeze`); `thaw`
gives back the plain JSON value (a fresh copy) that `json.dumps` writes as it was read.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TypeAlias

JSONValue: TypeAlias = "None | bool | int | float | str | list[JSONValue] | dict[str, JSONValue]"
JSONObject: TypeAlias = "dict[str, JSONValue]"
Frozen: TypeAlias = "None | bool | int | float | str | tuple[Frozen, ...] | Mapping[str, Frozen]"
FrozenObject: TypeAlias = "Mapping[str, Frozen]"

EMPTY: FrozenObject = MappingProxyType({})


def freeze(value: object) -> Frozen:
    """`value` (parsed JSON) with every object read-only and every array a tuple; anything else that is not a
    JSON scalar becomes its `str` (a parsed file holds none)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return MappingProxyType({str(key): freeze(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(item) for item in value)
    return str(value)


def freeze_object(value: object) -> FrozenObject:
    """`freeze` of an object; an empty mapping for anything else."""
    frozen = freeze(value)
    return frozen if isinstance(frozen, Mapping) else EMPTY


def thaw(value: Frozen) -> JSONValue:
    """The plain JSON value of a frozen one: dicts and lists, a fresh copy."""
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [thaw(item) for item in value]
    return value


def thaw_object(value: FrozenObject) -> JSONObject:
    return {key: thaw(item) for key, item in value.items()}


# Total readers: a field of the expected type, else the default (never an exception on hostile shapes). They
# read a frozen record, and a plain one (dicts and lists) the same way.


def obj(value: Frozen) -> FrozenObject:
    return value if isinstance(value, Mapping) else EMPTY


def items(value: Frozen) -> tuple[Frozen, ...]:
    """The items of an array (a frozen tuple, or the list of a plain record built in memory)."""
    if isinstance(value, tuple):
        return value
    return tuple(value) if isinstance(value, list) else ()


def objects(value: Frozen) -> tuple[FrozenObject, ...]:
    """The objects of an array (other items left out)."""
    return tuple(item for item in items(value) if isinstance(item, Mapping))


def text(value: Frozen, default: str = "") -> str:
    if value is None:
        return default
    return value if isinstance(value, str) else str(thaw(value))


def optional_text(value: Frozen) -> str | None:
    return None if value is None else text(value)


def integer(value: Frozen, default: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return int(value)


def number(value: Frozen, default: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return float(value)


def optional_number(value: Frozen) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def flag(value: Frozen) -> bool:
    return bool(value)


def texts(value: Frozen) -> tuple[str, ...]:
    return tuple(text(item) for item in items(value))
