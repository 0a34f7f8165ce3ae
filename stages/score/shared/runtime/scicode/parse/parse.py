"""Reading SciCode targets from the official HDF5 layout.

Layout (see the data README): `/<step_id>/test<i>/var1..varN`. One variable reads back as its value,
several as a tuple in h5py key order. A group named `list` holds a list, a group named
`sparse_matrix` a scipy sparse matrix (coo when `row`/`col` are present, bsr with `blocksize`, else
csr), any other group a dict whose keys become floats where they parse as floats. Byte strings are
decoded as UTF-8. Scalars come back as h5py returns them (numpy scalars), arrays as numpy arrays.
"""

from __future__ import annotations

from typing import Any

import h5py
import scipy.sparse

DEFAULT_TARGETS_FILE = "eval/data/test_data.h5"


def _dataset_value(dataset: h5py.Dataset) -> Any:
    value = dataset[()]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="strict")
    return value


def process_hdf5_list(group: h5py.Group) -> list[Any]:
    """The members of a `list` group, in h5py key order, as raw dataset values."""
    return [group[key][()] for key in group.keys()]


def process_hdf5_sparse_matrix(group: h5py.Group) -> Any:
    """Rebuild the sparse matrix stored in a `sparse_matrix` group."""
    data = group["data"][()]
    shape = tuple(group["shape"][()])
    if "row" in group and "col" in group:
        return scipy.sparse.coo_matrix((data, (group["row"][()], group["col"][()])), shape=shape)
    if "blocksize" in group:
        return scipy.sparse.bsr_matrix(
            (data, group["indices"][()], group["indptr"][()]), shape=shape, blocksize=tuple(group["blocksize"][()])
        )
    return scipy.sparse.csr_matrix((data, group["indices"][()], group["indptr"][()]), shape=shape)


def _float_key_or_text(key: str) -> Any:
    try:
        return float(key)
    except ValueError:
        return key


def process_hdf5_dict(group: h5py.Group) -> dict[Any, Any]:
    """A dict group: sub-groups are sparse matrices (under their text key), strings are decoded
    (text key), other values keep their key converted to float where it parses."""
    result: dict[Any, Any] = {}
    for key, member in group.items():
        if isinstance(member, h5py.Group):
            result[key] = process_hdf5_sparse_matrix(member["sparse_matrix"])
            continue
        value = member[()]
        if isinstance(value, bytes):
            result[key] = value.decode("utf-8", errors="strict")
        else:
            result[_float_key_or_text(key)] = value
    return result


def process_hdf5_datagroup(group: h5py.Group) -> Any:
    """Dispatch on the group's first key: `list`, `sparse_matrix`, otherwise a dict."""
    for key in group.keys():
        if key == "list":
            return process_hdf5_list(group[key])
        if key == "sparse_matrix":
            return process_hdf5_sparse_matrix(group[key])
        return process_hdf5_dict(group)
    return None


def _member_value(member: Any) -> Any:
    if isinstance(member, h5py.Dataset):
        return _dataset_value(member)
    return process_hdf5_datagroup(member)


def process_hdf5_to_tuple(step_id: str, test_num: int, h5py_file: str = DEFAULT_TARGETS_FILE) -> list[Any]:
    """The targets of tests 1..`test_num` of `step_id`: one value per test (a tuple when a test has
    several variables). Raises FileNotFoundError naming a missing test group."""
    targets: list[Any] = []
    with h5py.File(h5py_file, "r") as handle:
        for index in range(test_num):
            group_path = f"{step_id}/test{index + 1}"
            if group_path not in handle or not isinstance(handle[group_path], h5py.Group):
                raise FileNotFoundError(f"Path {group_path} not found in the file.")
            group = handle[group_path]
            keys = list(group.keys())
            if len(keys) == 1:
                targets.append(_member_value(group[keys[0]]))
            else:
                targets.append(tuple(_member_value(group[key]) for key in keys))
    return targets
