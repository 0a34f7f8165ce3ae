"""Comparison helpers used by SciCode test cases, with the official semantics.

`cmp_tuple_or_list` compares element-wise: dicts with `are_dicts_close`, csr/csc matrices densely,
bools with `==`, everything else with `np.allclose` (falling back to `==` when the shapes make
allclose raise ValueError). `are_dicts_close` first turns sympy Symbol keys and values into strings.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse
import sympy

_DICT_SPARSE_TYPES = (
    scipy.sparse.csr_matrix,
    scipy.sparse.csc_matrix,
    scipy.sparse.bsr_matrix,
    scipy.sparse.coo_matrix,
)
_LIST_SPARSE_TYPES = (scipy.sparse.csr_matrix, scipy.sparse.csc_matrix)


def process_symbol_in_dict(mapping: dict[Any, Any]) -> dict[Any, Any]:
    """A copy of `mapping` with sympy Symbol values and keys replaced by their string form."""
    converted: dict[Any, Any] = {}
    for key, value in mapping.items():
        converted[key] = str(value) if isinstance(value, sympy.Symbol) else value
        if isinstance(key, sympy.Symbol):
            converted[str(key)] = mapping[key]
            converted.pop(key)
    return converted


def _close_or_equal(left: Any, right: Any, **tolerances: Any) -> bool:
    try:
        return bool(np.allclose(left, right, **tolerances))
    except ValueError as error:
        print(error)
        return bool(left == right)


def are_dicts_close(dict1: dict[Any, Any], dict2: dict[Any, Any], atol: float = 1e-8, rtol: float = 1e-5) -> bool:
    """Same keys, and every value close (strings and symbols equal, sparse matrices densely)."""
    dict1 = process_symbol_in_dict(dict1)
    dict2 = process_symbol_in_dict(dict2)
    if dict1.keys() != dict2.keys():
        return False
    for key in dict1:
        left, right = dict1[key], dict2[key]
        if isinstance(left, (sympy.Symbol, str)):
            if not left == right:
                return False
        elif isinstance(left, _DICT_SPARSE_TYPES):
            if not np.allclose(left.toarray(), right.toarray(), atol=atol, rtol=rtol):
                return False
        else:
            try:
                if not np.allclose(left, right, atol=atol, rtol=rtol):
                    return False
            except ValueError:
                if not left == right:
                    return False
    return True


def are_csc_matrix_close(matrix1: Any, matrix2: Any) -> bool:
    """Two sparse matrices are close as dense arrays."""
    return bool(np.allclose(matrix1.toarray(), matrix2.toarray()))


def cmp_tuple_or_list(var1: Any, var2: Any) -> bool:
    """Same length and every pair of elements close (see the module docstring)."""
    if len(var1) != len(var2):
        return False
    for left, right in zip(var1, var2):
        if isinstance(left, dict):
            if not are_dicts_close(left, right):
                return False
        elif isinstance(left, _LIST_SPARSE_TYPES):
            if not are_csc_matrix_close(left, right):
                return False
        elif isinstance(left, bool):
            if not left == right:
                return False
        elif not _close_or_equal(left, right):
            return False
    return True
