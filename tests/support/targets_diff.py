"""Comparing two targets files (derived against official, or two derivations): used by the tests only."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any


def target_file_differences(
    candidate: Path,
    reference: Path,
    *,
    steps: Iterable[str] | None = None,
    rtol: float = 1e-6,
    atol: float = 1e-12,
    compare_storage: bool = True,
) -> list[str]:
    """Every difference between two targets files, one line each; [] when they agree.

    Layout: the same groups and datasets under each compared step, with the same dtype, shape and (with
    `compare_storage`) compression and chunking. Values: strings and booleans equal, numbers within
    `rtol`/`atol` (NaNs equal). `steps` defaults to every step of `reference`.
    """
    import h5py

    differences: list[str] = []
    with h5py.File(candidate, "r") as got, h5py.File(reference, "r") as want:
        for step_id in list(steps) if steps is not None else list(want.keys()):
            if step_id not in want or step_id not in got:
                differences.append(f"{step_id}: missing from {'reference' if step_id not in want else 'candidate'}")
                continue
            differences.extend(_group_differences(got[step_id], want[step_id], rtol, atol, compare_storage))
    return differences


def _members(group: Any) -> dict[str, Any]:
    names: list[str] = []
    group.visit(names.append)
    return {name: group[name] for name in names}


def _group_differences(got: Any, want: Any, rtol: float, atol: float, compare_storage: bool) -> list[str]:
    import h5py

    got_members, want_members = _members(got), _members(want)
    lines = [f"{want.name}/{name}: missing" for name in want_members.keys() - got_members.keys()]
    lines += [f"{got.name}/{name}: unexpected" for name in got_members.keys() - want_members.keys()]
    for name in sorted(want_members.keys() & got_members.keys()):
        a, b = got_members[name], want_members[name]
        if isinstance(a, h5py.Dataset) != isinstance(b, h5py.Dataset):
            lines.append(f"{b.name}: {'dataset' if isinstance(b, h5py.Dataset) else 'group'} expected")
        elif isinstance(b, h5py.Dataset):
            lines.extend(_dataset_differences(a, b, rtol, atol, compare_storage))
    return sorted(lines)


def _dataset_differences(got: Any, want: Any, rtol: float, atol: float, compare_storage: bool) -> list[str]:
    import numpy as np

    def storage(d: Any) -> tuple[Any, ...]:
        return (d.compression, d.compression_opts, d.shuffle, d.chunks) if compare_storage else ()

    if (got.dtype.kind, got.shape, storage(got)) != (want.dtype.kind, want.shape, storage(want)):
        return [
            f"{want.name}: stored as {got.dtype} {got.shape} {storage(got)}, expected {want.dtype} {want.shape} {storage(want)}"
        ]
    a, b = got[()], want[()]
    if want.dtype.kind in "OSUb":
        equal = bool(np.array_equal(a, b)) if isinstance(b, np.ndarray) else a == b
    else:
        equal = bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))
    return [] if equal else [f"{want.name}: values differ beyond rtol={rtol:g} atol={atol:g}"]
