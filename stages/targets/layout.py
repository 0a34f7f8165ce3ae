"""The official HDF5 layout of targets (the dispatch of the official `save_data_to_hdf5` / `save_dict_to_hdf5`).

`layout_of_test(value)` turns one test case's compared value into its `test<i>` group; `write_targets_file`
writes the groups of every step into one HDF5 file atomically.
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from stages.storage.artifacts import sha256_file
from stages.targets.errors import DerivationError

GZIP_MIN_BYTES = 4096  # arrays at least this large are stored gzip-compressed (level 9, shuffled)
GZIP_LEVEL = 9


@dataclass(frozen=True)
class H5Dataset:
    data: Any  # a numpy array, numpy scalar, Python scalar or str


@dataclass(frozen=True)
class H5Group:
    members: tuple[tuple[str, H5Dataset | H5Group], ...]


H5Node = H5Dataset | H5Group


def layout_of_test(value: Any) -> H5Group:
    """The `test<i>` group: a tuple becomes var1..varN, anything else is var1."""
    values = value if isinstance(value, tuple) else (value,)
    return H5Group(tuple((f"var{index + 1}", value_layout(item)) for index, item in enumerate(values)))


def value_layout(value: Any) -> H5Node:
    """One value as the official writer stores it (`save_data_to_hdf5`)."""
    import numpy as np

    if isinstance(value, dict):
        return H5Group(_dict_members(value))
    if isinstance(value, (list, tuple)):
        array = _writable_array(value)
        if array is not None:
            return H5Dataset(array)
        items = tuple((f"var{index + 1}", value_layout(item)) for index, item in enumerate(value))
        return H5Group((("list", H5Group(items)),))
    if _is_official_sparse(value):
        return H5Group((("sparse_matrix", _sparse_layout(value)),))
    if isinstance(value, (int, float, str, complex, bool, np.bool_, np.int_, np.ndarray)):
        return _checked_dataset(value)
    return H5Dataset(str(value))


def _dict_members(mapping: dict[Any, Any]) -> tuple[tuple[str, H5Node], ...]:
    """A dict as the official `save_dict_to_hdf5` stores it (no ragged-list fallback, no numpy ints)."""
    import numpy as np

    members: list[tuple[str, H5Node]] = []
    for key, value in mapping.items():
        name = _dict_key_name(key)
        if isinstance(value, dict):
            node: H5Node = H5Group(_dict_members(value))
        elif isinstance(value, (list, tuple)):
            array = _writable_array(value)
            if array is None:
                raise DerivationError(f"dict value under {name!r} is a list HDF5 cannot store as one array")
            node = H5Dataset(array)
        elif isinstance(value, (int, float, str, complex, bool, np.bool_, np.ndarray)):
            node = _checked_dataset(value)
        elif _is_official_sparse(value):
            node = H5Group((("sparse_matrix", _sparse_layout(value)),))
        else:
            node = H5Dataset(str(value))
        members.append((name, node))
    return tuple(members)


def _dict_key_name(key: Any) -> str:
    import numpy as np

    if isinstance(key, str):
        return key
    if isinstance(key, np.float64) or type(key).__module__.split(".")[0] == "sympy":
        return str(key)
    raise DerivationError(f"dict key {key!r} of type {type(key).__name__} has no HDF5 name in the official layout")


def _is_official_sparse(value: Any) -> bool:
    """The official writer recognises the four scipy sparse *matrix* classes only."""
    module = sys.modules.get("scipy.sparse")
    if module is None:
        return False
    return isinstance(value, (module.csr_matrix, module.csc_matrix, module.bsr_matrix, module.coo_matrix))


def _sparse_layout(matrix: Any) -> H5Group:
    import numpy as np
    import scipy.sparse

    members: list[tuple[str, H5Node]] = [("data", H5Dataset(matrix.data)), ("shape", H5Dataset(np.array(matrix.shape)))]
    if isinstance(matrix, scipy.sparse.coo_matrix):
        members += [("row", H5Dataset(matrix.row)), ("col", H5Dataset(matrix.col))]
    elif isinstance(matrix, scipy.sparse.bsr_matrix):
        members += [
            ("indices", H5Dataset(matrix.indices)),
            ("indptr", H5Dataset(matrix.indptr)),
            ("blocksize", H5Dataset(np.array(matrix.blocksize))),
        ]
    else:
        members += [("indices", H5Dataset(matrix.indices)), ("indptr", H5Dataset(matrix.indptr))]
    return H5Group(tuple(members))


def _writable_array(value: Any) -> Any:
    """`np.array(value)` when HDF5 can store it, else None (the official writer's try/except)."""
    import numpy as np

    try:
        array = np.array(value)
    except Exception:  # noqa: BLE001 - ragged sequences and friends: the official fallback applies
        return None
    return array if _hdf5_accepts_dtype(array.dtype) else None


def _checked_dataset(value: Any) -> H5Dataset:
    import numpy as np

    if isinstance(value, np.ndarray) and not _hdf5_accepts_dtype(value.dtype):
        raise DerivationError(f"an array of dtype {value.dtype} cannot be stored in HDF5")
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        raise DerivationError(f"integer {value} does not fit an HDF5 int64")
    return H5Dataset(value)


@cache
def _hdf5_accepts_dtype(dtype: Any) -> bool:
    """Whether h5py stores arrays of `dtype` (probed with an empty array in an in-memory file)."""
    import h5py
    import numpy as np

    with h5py.File(io.BytesIO(), "w") as probe:
        try:
            probe.create_dataset("probe", data=np.empty((0,), dtype=dtype))
        except (TypeError, ValueError):
            return False
    return True


def write_layout(parent: Any, name: str, node: H5Node) -> None:
    """Create `node` as `parent[name]` (an h5py group or file); large arrays gzip-compressed."""
    if isinstance(node, H5Group):
        group = parent.create_group(name)
        for member_name, member in node.members:
            write_layout(group, member_name, member)
    else:
        parent.create_dataset(name, data=node.data, **_compression(node.data))


def _compression(data: Any) -> dict[str, str | int | bool]:
    """The `create_dataset` options of `data`: gzip for a large numeric array, none otherwise."""
    import numpy as np

    if isinstance(data, np.ndarray) and data.ndim > 0 and data.nbytes >= GZIP_MIN_BYTES and data.dtype.kind in "biufc":
        return {"compression": "gzip", "compression_opts": GZIP_LEVEL, "shuffle": True}
    return {}


def write_targets_file(path: Path, steps: Mapping[str, Sequence[H5Group]]) -> str:
    """Write `/<step_id>/test<i>/...` for every step atomically; returns the file's sha256."""
    import h5py

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        with h5py.File(tmp_name, "w") as handle:
            for step_id, tests in steps.items():
                step_group = handle.create_group(step_id)
                for index, layout in enumerate(tests):
                    write_layout(step_group, f"test{index + 1}", layout)
        with open(tmp_name, "rb") as stream:
            os.fsync(stream.fileno())
        digest = sha256_file(Path(tmp_name))
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, path)
        return digest
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
