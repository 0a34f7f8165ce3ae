"""The data format between the test process and the checker: faithful round trips, refusals, hostile frames."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import scipy.sparse as sparse
import sympy

from stages.score.shared.child_runtime import CHILD_FOLDERS

sys.path[:0] = [folder for folder in CHILD_FOLDERS if folder not in sys.path]
import wire  # noqa: E402 - the module runs as a top-level module in the test process and the checker

X, Y = sympy.symbols("x y", real=True)
VALUES = [
    None,
    True,
    3,
    10**50,
    -1.5,
    float("-inf"),
    2 + 3j,
    "hé",
    b"\x00\x01",
    [1, (2, 3)],
    {1.5: "a", "k": [np.float64(2.5)]},
    {1, 2},
    frozenset({3}),
    np.arange(12).reshape(3, 4).T,
    np.array(["ab", "c"]),
    np.array([1 + 2j]),
    np.zeros((0, 1, 1)),
    np.bool_(True),
    np.int32(7),
    np.matrix([[1, 2]]),
    sparse.csr_matrix(np.eye(3)),
    sparse.coo_array(np.ones((2, 2))),
    X**2 + sympy.sin(Y) / 3,
    sympy.Matrix([[X, 1], [2, Y]]),
    sympy.pi * sympy.I,
    sympy.Rational(1, 3),
    sympy.Float("1.25"),
    sympy.Function("f")(X),
    sympy.Piecewise((X, X > 0), (0, True)),
    sympy.Eq(X, 1),
    sympy.oo,
]


def _same(left, right) -> bool:
    if type(left) is not type(right):
        return False
    if isinstance(left, np.ndarray):
        return left.dtype == right.dtype and left.shape == right.shape and np.array_equal(left, right)
    if sparse.issparse(left):
        return left.shape == right.shape and (left != right).nnz == 0
    if isinstance(left, float) and left != left:
        return right != right
    return bool(left == right)


@pytest.mark.parametrize("value", VALUES, ids=lambda value: type(value).__name__)
def test_round_trip_keeps_type_and_value(value) -> None:
    assert _same(wire.decode(wire.encode(value)), value)


def test_nan_survives() -> None:
    assert np.isnan(wire.decode(wire.encode(float("nan"))))


class Pretender(sympy.Expr):
    pass


@pytest.mark.parametrize(
    "value, fragment",
    [
        (object(), "builtins.object value cannot be sent"),
        (np.array([object()], dtype=object), "dtype object"),
        (np.zeros(2, dtype=[("a", int)]), "cannot be sent"),
        (np.zeros(3).view(type("Sub", (np.ndarray,), {})), "Sub value cannot be sent"),
        (Pretender(), "Pretender value cannot be sent"),
    ],
)
def test_values_outside_the_format_are_refused(value, fragment: str) -> None:
    with pytest.raises(wire.Unsendable, match=fragment):
        wire.encode(value)


def _frame(skeleton, data: bytes = b"") -> bytes:
    text = json.dumps(skeleton).encode() if not isinstance(skeleton, bytes) else skeleton
    return len(text).to_bytes(8, "big") + text + data


@pytest.mark.parametrize(
    "frame, fragment",
    [
        (b"", "shorter than its header"),
        ((10**6).to_bytes(8, "big") + b"[]", "larger than the frame"),
        (_frame(b'["a",'), "not JSON"),
        (_frame(["a", "|O8", [1], [0, 8]], b"x" * 8), "refused dtype"),
        (_frame(["a", "<f8", [2], [0, 8]], b"x" * 8), "does not match its shape"),
        (_frame(["a", "<f8", [1], [4, 8]], b"x" * 8), "past the end"),
        (_frame(["pickle", "x"]), "unknown node tag"),
        (_frame(["sym", "Lambda2", []]), "refused sympy class"),
        (_frame(["sp", "lil_thing", [2, 2], []]), "refused sparse class"),
        (_frame(["d", [[["l", []], ["n"]]]]), "not hashable"),
        (_frame(b'["l",[' * 150 + b'["n"]' + b"]]" * 150), "nested deeper"),
        (_frame(b'["l",[' * 30000 + b'["n"]' + b"]]" * 30000), "not JSON"),
        (_frame(["i", "9" * 30000]), "digit limit"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_hostile_frames_are_refused(frame: bytes, fragment: str) -> None:
    with pytest.raises(wire.BadFrame, match=fragment):
        wire.decode(frame)


def test_sympy_functions_are_rebuilt_without_evaluation() -> None:
    frame = _frame(["sym", "factorial", [["sym", "Integer", "1000000000"]]])
    assert str(wire.decode(frame)) == "factorial(1000000000)"
