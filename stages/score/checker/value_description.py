"""A bounded description of one compared value, and the differences of two described numeric values.

The checker describes the model-side values of a failed comparison (`describe`); the report describes the
target the same way and adds the differences (`differences`). A description is plain JSON data: the type, a
repr cut to `REPR_CHARS` characters and, for numbers and numeric arrays, the shape, the dtype, the element
count and the first `ELEMENTS_RECORDED` elements in C order (a complex number as `[re, im]`, a non-finite
one as the text `nan`, `inf` or `-inf`), so that it can be written as strict JSON.

Used in the checker process, where it is imported as a top-level module beside `checker.py`: it imports
numpy and the standard library only, and never raises (a value it cannot describe gets a reason instead).
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Mapping
from typing import Any, TypedDict

REPR_CHARS = 200
ELEMENTS_RECORDED = 256
NUMERIC_KINDS = "biufc"  # numpy dtype kinds: bool, signed, unsigned, float, complex

_REPR = reprlib.Repr()
_REPR.maxstring = REPR_CHARS
_REPR.maxother = REPR_CHARS
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxdict = 12
_REPR.maxlevel = 4


def _bounded_repr(value: Any) -> str:
    import numpy

    if isinstance(value, numpy.ndarray):
        with numpy.printoptions(threshold=24, edgeitems=3, linewidth=REPR_CHARS):
            text = repr(value)
    else:
        text = _REPR.repr(value)
    return text if len(text) <= REPR_CHARS else text[: REPR_CHARS - 3] + "..."


def _number(value: Any) -> Any:
    """An element as strict JSON: int, float, `[re, im]`, or the text of a non-finite float."""
    if isinstance(value, complex):
        return [_number(value.real), _number(value.imag)]
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    number = float(value)
    return number if math.isfinite(number) else str(number)


def _numeric_array(value: Any) -> Any:
    """`value` as a numeric numpy array (numbers, numeric arrays, and lists or tuples of numbers); None else."""
    import numpy

    if isinstance(value, numpy.ndarray):
        return value if value.dtype.kind in NUMERIC_KINDS else None
    if isinstance(value, (bool, int, float, complex, numpy.generic)):
        array = numpy.asarray(value)
    elif isinstance(value, (list, tuple)) and value:
        try:
            array = numpy.asarray(value)
        except Exception:  # noqa: BLE001 - ragged or mixed: no shape
            return None
    else:
        return None
    return array if array.dtype.kind in NUMERIC_KINDS else None


class _Shown(TypedDict):
    type: str
    repr: str


class Description(_Shown, total=False):
    """What `describe` records of a value; a number or numeric array also has its shape, dtype, element count and
    first elements."""

    shape: list[int]
    dtype: str
    size: int
    elements: list[object]  # each an int, a float, `[re, im]` or the text of a non-finite float


class Differences(TypedDict):
    max_abs: float
    max_rel: float | None
    compared: int  # elements compared
    size: int  # elements of the target


def describe(value: Any) -> Description:
    """The bounded description of `value` (see the module docstring); never raises."""
    try:
        record: Description = {"type": type(value).__name__, "repr": _bounded_repr(value)}
        array = _numeric_array(value)
        if array is not None:
            flat = array.reshape(-1)[:ELEMENTS_RECORDED].tolist()
            record["shape"] = [int(length) for length in array.shape]
            record["dtype"] = str(array.dtype)
            record["size"] = int(array.size)
            record["elements"] = [_number(element) for element in flat]
        return record
    except BaseException as error:  # noqa: BLE001 - whatever the value does, a description that says so
        return {"type": "unknown", "repr": f"(not describable: {type(error).__name__})"}


def _as_complex(element: Any) -> complex | None:
    if isinstance(element, bool):
        return complex(int(element))
    if isinstance(element, (int, float)):
        return complex(element)
    if isinstance(element, str):
        try:
            return complex(float(element))
        except ValueError:
            return None
    if isinstance(element, list) and len(element) == 2:
        real, imag = (_as_complex(part) for part in element)
        return None if real is None or imag is None else complex(real.real, imag.real)
    return None


def differences(model: Mapping[str, object], target: Mapping[str, object]) -> Differences | None:
    """The largest absolute and relative difference between the recorded elements of two numeric descriptions
    of the same shape (relative: over elements whose target is not 0); None when they are not comparable
    elementwise. `compared`: how many elements (fewer than `size` when more were not recorded)."""
    shape, elements, other = model.get("shape"), model.get("elements"), target.get("elements")
    if not isinstance(shape, list) or shape != target.get("shape"):
        return None
    if not isinstance(elements, list) or not isinstance(other, list):
        return None
    count = min(len(elements), len(other))
    largest_abs = 0.0
    largest_rel: float | None = None
    for mine, theirs in zip(elements[:count], other[:count]):
        a, b = _as_complex(mine), _as_complex(theirs)
        if a is None or b is None:
            return None
        gap = abs(a - b)
        if math.isnan(gap):
            gap = 0.0 if (math.isnan(abs(a)) and math.isnan(abs(b))) else math.inf
        largest_abs = max(largest_abs, gap)
        if b != 0:
            relative = gap / abs(b)
            largest_rel = relative if largest_rel is None else max(largest_rel, relative)
    size = target.get("size")
    return {
        "max_abs": largest_abs,
        "max_rel": largest_rel,
        "compared": count,
        "size": size if isinstance(size, int) else count,
    }
