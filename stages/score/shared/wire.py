"""The data format in which a test process sends the values it computed to the checker.

Standalone (standard library, numpy when present; scipy and sympy looked up only when a value needs
them): `encode` runs in the untrusted test process, `decode` in the trusted checker. Reading never
runs code: the frame is one JSON skeleton (parsed by `json`) plus raw buffers, and `decode` builds
only these types, checking every node against a size and depth budget:

    None, bool, int, float, complex, str, bytes        Python scalars
    list, tuple, dict, set, frozenset                  containers (dict keys of the hashable kinds)
    numpy.ndarray, numpy scalars                       dtype kinds b, i, u, f, c, U, S only (no object,
                                                       no structured dtype), from the raw buffer
    scipy.sparse matrices and arrays                   rebuilt from COO parts, in the sent format
    sympy expressions                                  rebuilt from an allow-list of sympy classes

Anything else cannot be sent: `encode` raises `Unsendable` naming the type, and the test fails with
that reason. `decode` raises `BadFrame` for anything malformed or over budget.

Frame: 8-byte big-endian skeleton length, the skeleton (UTF-8 JSON), then the buffers back to back.
Skeleton nodes are JSON arrays whose first element is a tag (see `_DECODERS`).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any

HEADER_BYTES = 8
MAX_SKELETON_BYTES = 64 << 20
MAX_NODES = 2_000_000
MAX_DEPTH = 100
MAX_INT_DIGITS = 20_000
MAX_NDIM = 32
ALLOWED_DTYPE_KINDS = frozenset("biufcUS")
SPARSE_CLASSES = frozenset(
    {
        "csr_matrix",
        "csc_matrix",
        "coo_matrix",
        "bsr_matrix",
        "dia_matrix",
        "lil_matrix",
        "dok_matrix",
        "csr_array",
        "csc_array",
        "coo_array",
        "bsr_array",
        "dia_array",
        "lil_array",
        "dok_array",
    }
)
SYMPY_ATOMS = {  # class name -> attribute of sympy.S
    "Pi": "Pi",
    "Exp1": "Exp1",
    "ImaginaryUnit": "ImaginaryUnit",
    "Infinity": "Infinity",
    "NegativeInfinity": "NegativeInfinity",
    "ComplexInfinity": "ComplexInfinity",
    "NaN": "NaN",
    "Zero": "Zero",
    "One": "One",
    "NegativeOne": "NegativeOne",
    "Half": "Half",
    "EulerGamma": "EulerGamma",
    "GoldenRatio": "GoldenRatio",
    "Catalan": "Catalan",
    "BooleanTrue": "true",
    "BooleanFalse": "false",
}
SYMPY_OPERATIONS = frozenset(
    {
        "Add",
        "Mul",
        "Pow",
        "exp",
        "log",
        "sin",
        "cos",
        "tan",
        "cot",
        "sec",
        "csc",
        "asin",
        "acos",
        "atan",
        "atan2",
        "acot",
        "sinh",
        "cosh",
        "tanh",
        "coth",
        "asinh",
        "acosh",
        "atanh",
        "Abs",
        "sign",
        "re",
        "im",
        "conjugate",
        "arg",
        "floor",
        "ceiling",
        "Min",
        "Max",
        "factorial",
        "gamma",
        "erf",
        "erfc",
        "Heaviside",
        "DiracDelta",
        "besselj",
        "bessely",
        "besseli",
        "besselk",
        "Piecewise",
        "ExprCondPair",
        "Equality",
        "Unequality",
        "StrictLessThan",
        "LessThan",
        "StrictGreaterThan",
        "GreaterThan",
        "And",
        "Or",
        "Not",
        "Tuple",
        "Derivative",
        "Integral",
        "Sum",
        "Product",
        "Rational",
        "Integer",
        "Float",
        "Symbol",
        "Dummy",
        "ImmutableDenseMatrix",
        "MutableDenseMatrix",
        "Mod",
        "sqrt",
        "Function",
        "Lambda",
    }
)


class Unsendable(TypeError):
    """A value the test process cannot send (a type outside the format)."""


class BadFrame(ValueError):
    """A frame the checker refuses: malformed, an unknown tag or type, or over a size or depth limit."""


# ---------------------------------------------------------------------------
# Encoding (untrusted side)
# ---------------------------------------------------------------------------

_COLLECTION_TAGS: dict[type, str] = {list: "l", tuple: "t", set: "set", frozenset: "fset"}


class _Buffers:
    """The raw buffers of one frame and their running length."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0


def encode(value: Any) -> bytes:
    buffers = _Buffers()
    skeleton = json.dumps(_encode(value, buffers, 0), separators=(",", ":"), allow_nan=False).encode("utf-8")
    return len(skeleton).to_bytes(HEADER_BYTES, "big") + skeleton + b"".join(buffers.parts)


def _buffer(buffers: _Buffers, data: bytes) -> list[int]:
    offset = buffers.size
    buffers.parts.append(data)
    buffers.size += len(data)
    return [offset, len(data)]


def _float_text(value: float) -> str:
    return float.hex(float(value))


def _encode(value: Any, buffers: _Buffers, depth: int) -> list[Any]:
    if depth > MAX_DEPTH:
        raise Unsendable(f"a value nested deeper than {MAX_DEPTH} levels")
    kind = type(value)
    if value is None:
        return ["n"]
    if kind is bool:
        return ["b", value]
    if kind is int:
        return ["i", str(value)]
    if kind is float:
        return ["f", _float_text(value)]
    if kind is complex:
        return ["c", _float_text(value.real), _float_text(value.imag)]
    if kind is str:
        return ["s", value]
    if kind is bytes:
        return ["y", _buffer(buffers, value)]
    if kind in (list, tuple, set, frozenset):
        tag = _COLLECTION_TAGS[kind]
        return [tag, [_encode(item, buffers, depth + 1) for item in value]]
    if kind is dict:
        return [
            "d",
            [[_encode(key, buffers, depth + 1), _encode(item, buffers, depth + 1)] for key, item in value.items()],
        ]
    numpy = sys.modules.get("numpy")
    if numpy is not None and kind is numpy.ndarray:
        return _encode_array(numpy, value, buffers)
    if numpy is not None and kind is numpy.matrix:
        return ["mat", _encode_array(numpy, numpy.asarray(value), buffers)]
    if numpy is not None and isinstance(value, numpy.generic) and type(value).__module__ == "numpy":
        array = numpy.asarray(value)
        _check_dtype(array.dtype)
        return ["g", array.dtype.str, _buffer(buffers, array.tobytes())]
    sparse = sys.modules.get("scipy.sparse")
    if (
        numpy is not None
        and sparse is not None
        and kind.__name__ in SPARSE_CLASSES
        and kind.__module__.startswith("scipy.sparse")
    ):
        coo = value.tocoo()
        parts = [_encode_array(numpy, numpy.asarray(part), buffers) for part in (coo.data, coo.row, coo.col)]
        return ["sp", kind.__name__, [int(size) for size in value.shape], parts]
    sympy = sys.modules.get("sympy")
    if sympy is not None and _is_sympy_value(sympy, value):
        return _encode_sympy(sympy, value, buffers, depth)
    raise Unsendable(
        f"a {kind.__module__}.{kind.__qualname__} value cannot be sent to the checker "
        "(only numbers, strings, containers, numpy arrays, sparse matrices and sympy expressions)"
    )


def _is_sympy_value(sympy: Any, value: Any) -> bool:
    """A value of sympy's own classes (an undefined function application is rebuilt by name)."""
    if isinstance(value, sympy.core.function.AppliedUndef):
        return True
    module = getattr(type(value), "__module__", None) or ""
    return isinstance(value, (sympy.Basic, sympy.MatrixBase)) and module.startswith("sympy.")


def _check_dtype(dtype: Any) -> None:
    if dtype.kind not in ALLOWED_DTYPE_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise Unsendable(f"a numpy value of dtype {dtype} cannot be sent (only bool, integer, float, complex, string)")


def _encode_array(numpy: Any, array: Any, buffers: _Buffers) -> list[Any]:
    _check_dtype(array.dtype)
    contiguous = numpy.ascontiguousarray(array)
    return ["a", contiguous.dtype.str, [int(size) for size in array.shape], _buffer(buffers, contiguous.tobytes())]


def _encode_sympy(sympy: Any, value: Any, buffers: _Buffers, depth: int) -> list[Any]:
    name = type(value).__name__
    if isinstance(value, sympy.Symbol):
        assumptions = {str(key): bool(flag) for key, flag in dict(value.assumptions0).items() if flag is not None}
        return ["sym", "Dummy" if isinstance(value, sympy.Dummy) else "Symbol", value.name, assumptions]
    if isinstance(value, sympy.Integer):
        return ["sym", "Integer", str(int(value))]
    if isinstance(value, sympy.Rational):
        return ["sym", "Rational", str(value.p), str(value.q)]
    if isinstance(value, sympy.Float):
        return ["sym", "Float", str(value), int(value._prec)]
    if name in SYMPY_ATOMS:
        return ["sym", name]
    if isinstance(value, sympy.MatrixBase):
        matrix = name if name in ("ImmutableDenseMatrix", "MutableDenseMatrix") else "ImmutableDenseMatrix"
        return [
            "sym",
            matrix,
            [int(value.rows), int(value.cols)],
            [_encode(item, buffers, depth + 1) for item in value],
        ]
    if isinstance(value, sympy.core.function.AppliedUndef):
        return ["sym", "Function", value.func.__name__, [_encode(arg, buffers, depth + 1) for arg in value.args]]
    if name not in SYMPY_OPERATIONS:
        raise Unsendable(f"a sympy {name} expression cannot be sent to the checker")
    return ["sym", name, [_encode(arg, buffers, depth + 1) for arg in value.args]]


# ---------------------------------------------------------------------------
# Decoding (trusted side)
# ---------------------------------------------------------------------------


class _Decoder:
    def __init__(self, frame: bytes) -> None:
        if len(frame) < HEADER_BYTES:
            raise BadFrame("a frame shorter than its header")
        size = int.from_bytes(frame[:HEADER_BYTES], "big")
        if size > MAX_SKELETON_BYTES or HEADER_BYTES + size > len(frame):
            raise BadFrame("a frame whose skeleton is larger than the frame or the limit")
        try:
            self.skeleton = json.loads(frame[HEADER_BYTES : HEADER_BYTES + size].decode("utf-8"))
        except (ValueError, RecursionError) as error:
            raise BadFrame(f"a skeleton that is not JSON ({type(error).__name__})") from None
        self.data = memoryview(frame)[HEADER_BYTES + size :]
        self.nodes = 0

    def buffer(self, reference: Any) -> bytes:
        if not (
            isinstance(reference, list) and len(reference) == 2 and all(type(n) is int and n >= 0 for n in reference)
        ):
            raise BadFrame("a malformed buffer reference")
        offset, length = reference
        if offset + length > len(self.data):
            raise BadFrame("a buffer reference past the end of the frame")
        return bytes(self.data[offset : offset + length])

    def value(self, node: Any, depth: int = 0) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise BadFrame(f"more than {MAX_NODES} values in one frame")
        if depth > MAX_DEPTH:
            raise BadFrame(f"values nested deeper than {MAX_DEPTH} levels")
        if not isinstance(node, list) or not node or not isinstance(node[0], str):
            raise BadFrame("a malformed node")
        decoder = _DECODERS.get(node[0])
        if decoder is None:
            raise BadFrame(f"an unknown node tag {node[0][:20]!r}")
        try:
            return decoder(self, node, depth)
        except BadFrame:
            raise
        except (TypeError, ValueError, IndexError, KeyError, OverflowError, MemoryError, AttributeError) as error:
            raise BadFrame(f"a malformed {node[0]!r} node ({type(error).__name__}: {str(error)[:200]})") from None


def decode(frame: bytes) -> Any:
    decoder = _Decoder(frame)
    return decoder.value(decoder.skeleton)


def _items(node: list[Any], index: int) -> list[Any]:
    items = node[index]
    if not isinstance(items, list):
        raise BadFrame("a container node without a list of items")
    return items


def _float(text: Any) -> float:
    if not isinstance(text, str):
        raise BadFrame("a float that is not a hex string")
    return float.fromhex(text) if text not in ("nan", "inf", "-inf") else float(text)


def _int(text: Any) -> int:
    if not isinstance(text, str) or len(text) > MAX_INT_DIGITS:
        raise BadFrame("an integer that is not a decimal string within the digit limit")
    return int(text)


def _hashable(key: Any) -> Any:
    try:
        hash(key)
    except TypeError:
        raise BadFrame("a dict key or set item that is not hashable") from None
    return key


def _numpy() -> Any:
    import numpy

    return numpy


def _dtype(text: Any) -> Any:
    if not isinstance(text, str) or len(text) > 16:
        raise BadFrame("a malformed dtype")
    dtype = _numpy().dtype(text)
    if dtype.kind not in ALLOWED_DTYPE_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise BadFrame(f"a refused dtype {text!r}")
    return dtype


def _array(decoder: _Decoder, node: list[Any], depth: int) -> Any:
    numpy = _numpy()
    dtype = _dtype(node[1])
    shape = node[2]
    if not isinstance(shape, list) or len(shape) > MAX_NDIM or not all(type(n) is int and n >= 0 for n in shape):
        raise BadFrame("a malformed array shape")
    data = decoder.buffer(node[3])
    count = math.prod(shape)
    if count * dtype.itemsize != len(data):
        raise BadFrame("an array whose buffer does not match its shape and dtype")
    return numpy.frombuffer(data, dtype=dtype).reshape(shape).copy()


def _scalar(decoder: _Decoder, node: list[Any], depth: int) -> Any:
    dtype = _dtype(node[1])
    data = decoder.buffer(node[2])
    if len(data) != dtype.itemsize:
        raise BadFrame("a numpy scalar of the wrong size")
    return _numpy().frombuffer(data, dtype=dtype)[0]


def _sparse(decoder: _Decoder, node: list[Any], depth: int) -> Any:
    import scipy.sparse

    name = node[1]
    if name not in SPARSE_CLASSES:
        raise BadFrame(f"a refused sparse class {str(name)[:40]!r}")
    shape = node[2]
    if not isinstance(shape, list) or len(shape) != 2 or not all(type(n) is int and n >= 0 for n in shape):
        raise BadFrame("a malformed sparse shape")
    parts = _items(node, 3)
    if len(parts) != 3:
        raise BadFrame("a sparse node without data, row and col")
    data, row, col = (decoder.value(part, depth + 1) for part in parts)
    numpy = _numpy()
    if not all(isinstance(part, numpy.ndarray) and part.ndim == 1 for part in (data, row, col)):
        raise BadFrame("sparse parts that are not vectors")
    if row.dtype.kind not in "iu" or col.dtype.kind not in "iu" or not len(data) == len(row) == len(col):
        raise BadFrame("sparse indices of the wrong type or length")
    if len(row) and (row.min() < 0 or col.min() < 0 or row.max() >= shape[0] or col.max() >= shape[1]):
        raise BadFrame("sparse indices outside the shape")
    array_kind = name.endswith("_array")
    coo = (scipy.sparse.coo_array if array_kind else scipy.sparse.coo_matrix)((data, (row, col)), shape=tuple(shape))
    return getattr(scipy.sparse, name)(coo)


def _sympy(decoder: _Decoder, node: list[Any], depth: int) -> Any:
    import sympy

    name = node[1]
    if name in SYMPY_ATOMS:
        return getattr(sympy.S, SYMPY_ATOMS[name])
    if name in ("Symbol", "Dummy"):
        symbol_name, assumptions = node[2], node[3]
        if (
            not isinstance(symbol_name, str)
            or not isinstance(assumptions, dict)
            or not all(isinstance(key, str) and type(flag) is bool for key, flag in assumptions.items())
        ):
            raise BadFrame("a malformed sympy symbol")
        return getattr(sympy, name)(symbol_name, **assumptions)
    if name == "Integer":
        return sympy.Integer(_int(node[2]))
    if name == "Rational":
        return sympy.Rational(_int(node[2]), _int(node[3]))
    if name == "Float":
        if (
            not isinstance(node[2], str)
            or len(node[2]) > 1000
            or type(node[3]) is not int
            or not 1 <= node[3] <= 10_000
        ):
            raise BadFrame("a malformed sympy Float")
        return sympy.Float(node[2], precision=node[3])
    if name in ("ImmutableDenseMatrix", "MutableDenseMatrix"):
        rows, cols = node[2]
        items = [decoder.value(item, depth + 1) for item in _items(node, 3)]
        if type(rows) is not int or type(cols) is not int or rows * cols != len(items):
            raise BadFrame("a malformed sympy matrix")
        return getattr(sympy, name)(rows, cols, items)
    if name == "Function":
        if not isinstance(node[2], str) or not node[2].isidentifier():
            raise BadFrame("a malformed sympy function name")
        return sympy.Function(node[2])(*(decoder.value(arg, depth + 1) for arg in _items(node, 3)))
    if name not in SYMPY_OPERATIONS:
        raise BadFrame(f"a refused sympy class {str(name)[:40]!r}")
    cls = getattr(sympy, name, None) or getattr(sympy.functions.elementary.piecewise, name, None)
    if not isinstance(cls, type) or not issubclass(cls, sympy.Basic):
        raise BadFrame(f"sympy has no class {name!r}")
    args = [decoder.value(arg, depth + 1) for arg in _items(node, 2)]
    try:  # rebuilt as sent: no evaluation (factorial(10**9) stays a formula, Add keeps its argument order)
        return cls(*args, evaluate=False)
    except TypeError:
        return cls(*args)


def _container(kind: Callable[[list[Any]], Any]) -> Callable[[_Decoder, list[Any], int], Any]:
    def build(decoder: _Decoder, node: list[Any], depth: int) -> Any:
        return kind([decoder.value(item, depth + 1) for item in _items(node, 1)])

    return build


def _hashable_container(kind: Callable[[list[Any]], Any]) -> Callable[[_Decoder, list[Any], int], Any]:
    def build(decoder: _Decoder, node: list[Any], depth: int) -> Any:
        return kind([_hashable(decoder.value(item, depth + 1)) for item in _items(node, 1)])

    return build


def _dict(decoder: _Decoder, node: list[Any], depth: int) -> Any:
    result = {}
    for pair in _items(node, 1):
        if not isinstance(pair, list) or len(pair) != 2:
            raise BadFrame("a malformed dict item")
        result[_hashable(decoder.value(pair[0], depth + 1))] = decoder.value(pair[1], depth + 1)
    return result


def _bool(decoder: _Decoder, node: list[Any], depth: int) -> bool:
    if type(node[1]) is not bool:
        raise BadFrame("a bool node without a bool")
    return node[1]


def _str(decoder: _Decoder, node: list[Any], depth: int) -> str:
    if not isinstance(node[1], str):
        raise BadFrame("a str node without a string")
    return node[1]


_DECODERS: dict[str, Callable[[_Decoder, list[Any], int], Any]] = {
    "n": lambda decoder, node, depth: None,
    "b": _bool,
    "i": lambda decoder, node, depth: _int(node[1]),
    "f": lambda decoder, node, depth: _float(node[1]),
    "c": lambda decoder, node, depth: complex(_float(node[1]), _float(node[2])),
    "s": _str,
    "y": lambda decoder, node, depth: decoder.buffer(node[1]),
    "l": _container(list),
    "t": _container(tuple),
    "set": _hashable_container(set),
    "fset": _hashable_container(frozenset),
    "d": _dict,
    "a": _array,
    "mat": lambda decoder, node, depth: _numpy().asmatrix(_array(decoder, node[1], depth + 1)),
    "g": _scalar,
    "sp": _sparse,
    "sym": _sympy,
}
