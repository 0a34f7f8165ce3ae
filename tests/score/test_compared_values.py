"""What a failed check compared: the checker's description of the model-side values (real test processes and
checker on the validation targets), never a target value; the description and differences functions."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from stages.score.checker.value_description import ELEMENTS_RECORDED, REPR_CHARS, describe, differences
from tests.score.score_helpers import run_code
from tests.support.run_artifacts import json_object, json_objects, json_str

WRONG_TENSOR = "def tensor(*args):\n    M = 1\n    for a in args:\n        M = np.kron(M, a)\n    return 2 * M + 0.5\n"
TEXT_TENSOR = "def tensor(*args):\n    return 'a tensor, surely' * 40\n"


def test_a_wrong_numeric_answer_records_its_shape_dtype_and_elements_only(shared_scicode: Path) -> None:
    verdict = run_code(shared_scicode, "19", "19.1", WRONG_TENSOR)
    assert verdict.status == "fail" and "test 1 failed" in verdict.reason
    compared = verdict.compared
    assert compared is not None and compared["test"] == 0 and compared["uses_target"] is True
    statement = json_str(compared["statement"])
    assert "target" in statement and "allclose" in statement
    [value] = json_objects(compared["values"])
    assert value["target"] == []  # compared with the whole target
    described = json_object(value["description"])
    assert described["shape"] == [4] and described["dtype"] == "float64" and described["size"] == 4
    assert described["elements"] == [0.5, 0.5, 0.5, 2.5]  # 2 * kron([0, 1], [0, 1]) + 0.5
    record = verdict.as_record()
    assert record["compared"] == compared
    # no target value in the record: the target of 19.1 test 1 is [0, 0, 0, 1]
    assert "elements" not in str({k: v for k, v in compared.items() if k != "values"})


def test_a_value_of_another_type_is_described_by_type_and_a_bounded_repr(shared_scicode: Path) -> None:
    verdict = run_code(shared_scicode, "19", "19.1", TEXT_TENSOR)
    assert verdict.status == "fail" and "raised while comparing" in verdict.reason
    assert verdict.compared is not None
    [value] = json_objects(verdict.compared["values"])
    described = json_object(value["description"])
    assert described["type"] == "str" and "shape" not in described
    shown = json_str(described["repr"])
    assert len(shown) <= REPR_CHARS and shown.startswith("'a tensor")


def test_a_pass_records_nothing_compared(shared_scicode: Path) -> None:
    reference = "def tensor(*args):\n    M = 1\n    for a in args:\n        M = np.kron(M, a)\n    return M\n"
    verdict = run_code(shared_scicode, "19", "19.1", reference)
    assert verdict.status == "pass" and verdict.compared is None and "compared" not in verdict.as_record()


@pytest.mark.parametrize(
    "value,expected",
    [
        (np.arange(6).reshape(2, 3), {"type": "ndarray", "shape": [2, 3], "dtype": "int64", "size": 6}),
        (1.5, {"type": "float", "shape": [], "dtype": "float64", "size": 1, "elements": [1.5]}),
        ([1, 2.5], {"type": "list", "shape": [2], "size": 2, "elements": [1.0, 2.5]}),
        (
            np.array([np.nan, np.inf, 1 + 2j]),
            {"dtype": "complex128", "elements": [["nan", 0.0], ["inf", 0.0], [1.0, 2.0]]},
        ),
        ({"a": 1}, {"type": "dict"}),
        ("x" * 1000, {"type": "str"}),
    ],
)
def test_descriptions(value, expected) -> None:
    described = describe(value)
    fields = dict(described)
    for name, wanted in expected.items():
        assert fields[name] == wanted, name
    assert len(described["repr"]) <= REPR_CHARS


def test_a_large_array_records_its_first_elements_only() -> None:
    described = describe(np.ones((100, 100)))
    assert described["size"] == 10_000 and len(described["elements"]) == ELEMENTS_RECORDED


def test_a_value_whose_repr_or_conversion_raises_is_still_described() -> None:
    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    class Ragged(list):
        def __len__(self) -> int:
            raise RuntimeError("no length")

    assert describe(Hostile())["type"] == "Hostile"  # reprlib names the instance instead
    assert describe(Ragged([1]))["type"] in ("Ragged", "unknown")


def test_differences_by_hand() -> None:
    model = describe(np.array([1.0, 2.0, 4.0]))
    target = describe(np.array([1.0, 2.5, 0.0]))
    gaps = differences(model, target)
    # |1-1| = 0, |2-2.5| = 0.5, |4-0| = 4: max abs 4; relative over nonzero targets: 0, 0.5/2.5 = 0.2
    assert gaps == {"max_abs": 4.0, "max_rel": pytest.approx(0.2), "compared": 3, "size": 3}
    assert differences(model, describe(np.zeros(4))) is None  # shapes differ
    assert differences(describe("text"), target) is None
    nan = differences(describe(np.array([math.nan])), describe(np.array([1.0])))
    assert nan is not None and nan["max_abs"] == math.inf
