"""What a failed check compared, as report.html shows it: the model-side values the checker described (from
the details file) beside the target they were compared with and their largest differences.

The details file holds the model side only (`stages.score.checker.checker.compared_values`); the target side is read
here, when summarize writes report.html, from the run's targets file (`stages.targets.resolve`), described by
the same function the checker uses and never written anywhere but the page. The details record is untrusted
data: every field is checked for its type, every text bounded and made valid, nothing in it is executed (a
target part is named by constant subscripts only).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stages.execution.untrusted import valid_text
from stages.score import REPR_CHARS, describe, differences

ELEMENTS_SHOWN = 6
PATH_DEPTH = 4
VALUES_SHOWN = 4
STATEMENT_CHARS = 500

TargetsOf = Callable[[str], "Sequence[Any] | str"]  # a step's target values by test, or why they are unavailable


@dataclass(frozen=True)
class ValueSide:
    """One side of a comparison: its type, and for numbers their shape, dtype and first elements; its repr."""

    type: str
    shape: str | None
    dtype: str | None
    elements: str | None
    repr: str


@dataclass(frozen=True)
class ComparedValue:
    label: str
    model: ValueSide
    target_label: str | None  # `target`, `target[0]`; None: the statement compared it with no target part
    target: ValueSide | None
    differences: str | None
    note: str | None  # why the target side or the differences are not shown


@dataclass(frozen=True)
class ComparedView:
    test: int  # 1-based
    statement: str
    values: tuple[ComparedValue, ...]


def _text(value: Any, limit: int) -> str:
    text = valid_text(value) if isinstance(value, str) else ""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _element(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float, str, list)):
        return "?"
    if isinstance(value, str):
        return _text(value, 12)
    if isinstance(value, list):
        if len(value) == 2 and all(isinstance(part, (int, float)) and not isinstance(part, bool) for part in value):
            return f"{value[0]:.6g}{value[1]:+.6g}j"
        return "?"
    return f"{value:.6g}"


def value_side(description: Any) -> ValueSide:
    """A description record (checker's or ours) as the page shows it; any record gives one."""
    record = description if isinstance(description, Mapping) else {}
    shape = record.get("shape")
    elements = record.get("elements")
    size = record.get("size")
    shown_shape = (
        "(" + ", ".join(str(n) for n in shape[:8]) + ("," if len(shape) == 1 else "") + ")"
        if isinstance(shape, list) and all(isinstance(n, int) and not isinstance(n, bool) for n in shape)
        else None
    )
    shown_elements = None
    if isinstance(elements, list):
        first = ", ".join(_element(element) for element in elements[:ELEMENTS_SHOWN])
        total = size if isinstance(size, int) and not isinstance(size, bool) else len(elements)
        shown_elements = (
            f"[{first}{', ...' if total > ELEMENTS_SHOWN else ''}] (first {min(total, ELEMENTS_SHOWN)} of {total})"
        )
    return ValueSide(
        type=_text(record.get("type"), 80) or "unknown",
        shape=shown_shape,
        dtype=_text(record.get("dtype"), 40) or None,
        elements=shown_elements,
        repr=_text(record.get("repr"), REPR_CHARS),
    )


def _path(value: Any) -> list[int | str] | None:
    if not isinstance(value, list) or len(value) > PATH_DEPTH:
        return None
    if not all(type(key) in (int, str) for key in value):
        return None
    return list(value)


def _path_label(path: Sequence[int | str]) -> str:
    return "target" + "".join(f"[{key!r}]" for key in path)


def _target_part(target: Any, path: Sequence[int | str]) -> tuple[bool, Any]:
    part = target
    for key in path:
        try:
            part = part[key]
        except (LookupError, TypeError, ValueError):
            return False, None
    return True, part


def _differences_text(found: Mapping[str, Any] | None) -> str | None:
    if found is None:
        return None
    relative = found["max_rel"]
    shown_relative = "-" if relative is None else f"{relative:.3g}"
    over = (
        f"over all {found['compared']} elements"
        if found["compared"] >= found["size"]
        else f"over the first {found['compared']} of {found['size']} elements"
    )
    return f"largest absolute difference {found['max_abs']:.3g}, largest relative difference {shown_relative} ({over})"


def _compared_value(number: int, record: Any, target: Any | None, unavailable: str | None) -> ComparedValue:
    entry = record if isinstance(record, Mapping) else {}
    label = f"value {number}"
    described = entry.get("description")
    model_description: dict[str, Any] = dict(described) if isinstance(described, Mapping) else {}
    model = value_side(model_description)
    path = _path(entry.get("target"))
    if path is None:
        return ComparedValue(label, model, None, None, None, "compared with no part of the target")
    if unavailable is not None:
        return ComparedValue(label, model, _path_label(path), None, None, f"target not shown: {unavailable}")
    found, part = _target_part(target, path)
    if not found:
        return ComparedValue(label, model, _path_label(path), None, None, "target part not found in the targets file")
    target_description = describe(part)
    gaps = differences(model_description, target_description)
    note = None if gaps is not None else "no elementwise differences: not two numeric values of the same shape"
    return ComparedValue(label, model, _path_label(path), value_side(target_description), _differences_text(gaps), note)


def compared_view(compared: Any, step_id: str, targets_of: TargetsOf) -> ComparedView | None:
    """The view of a verdict's `compared` record (None when there is none or it is not one)."""
    if not isinstance(compared, Mapping):
        return None
    test = compared.get("test")
    values = compared.get("values")
    if type(test) is not int or test < 0 or not isinstance(values, list):
        return None
    entries = values[:VALUES_SHOWN]
    needs_target = any(isinstance(entry, Mapping) and _path(entry.get("target")) is not None for entry in entries)
    target: Any = None
    unavailable: str | None = None
    if needs_target:
        loaded = targets_of(step_id)
        if isinstance(loaded, str):
            unavailable = loaded
        elif test < len(loaded):
            target = loaded[test]
        else:
            unavailable = f"the targets file has no test {test + 1} for step {step_id}"
    return ComparedView(
        test=test + 1,
        statement=_text(compared.get("statement"), STATEMENT_CHARS),
        values=tuple(_compared_value(k, entry, target, unavailable) for k, entry in enumerate(entries, start=1)),
    )
