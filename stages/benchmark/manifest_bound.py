"""Manifest-bound loading, as a manifest-bound dataset's own harness does it: the problem file's md5, the number
and order of its problems, and the targets file's md5 must be those its published manifest states.

Every check fails with one line (`ProblemDataError`) naming the file and both values; a manifest that does not
parse fails with one line naming the file and the line. The md5 of a file is computed once per file version
(path, size, mtime) in this process.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from stages.benchmark.datasets import ManifestBinding, ProblemDataError

CHUNK = 1 << 20


@lru_cache(maxsize=32)
def _md5_of_version(path: Path, size: int, mtime_ns: int) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def md5_file(path: Path) -> str:
    """md5 of the file's bytes (the sum the published manifests state)."""
    stat = path.stat()
    return _md5_of_version(path.resolve(), stat.st_size, stat.st_mtime_ns)


def read_published_manifest(path: Path, binding: ManifestBinding) -> Mapping[str, Any]:
    """The published manifest at `path`: a JSON object with the binding's fields; one line naming the file (and
    the line) otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProblemDataError(f"missing {path}: the manifest that binds the problem file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ProblemDataError(f"{path}: unreadable ({error})") from None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise ProblemDataError(f"{path}:{error.lineno}: not valid JSON ({error.msg})") from None
    if not isinstance(record, dict):
        raise ProblemDataError(f"{path}:1: not a JSON object")
    for field in (binding.problems_md5, binding.n_problems, binding.problem_order):
        if field not in record:
            raise ProblemDataError(f"{path}: no field {field!r} (expected {_fields_text(binding)})")
    _check_field_types(path, record, binding)
    return record


def _check_field_types(path: Path, record: Mapping[str, Any], binding: ManifestBinding) -> None:
    """The binding fields hold what the checks compare: an md5 text, a whole number, a list of problem ids."""
    shapes = (
        (binding.problems_md5, isinstance(record[binding.problems_md5], str), "a text (an md5)"),
        (binding.n_problems, _is_whole(record[binding.n_problems]), "a whole number"),
        (binding.problem_order, _is_id_list(record[binding.problem_order]), "a list of problem ids"),
        (binding.targets_md5, isinstance(record.get(binding.targets_md5, ""), str), "a text (an md5)"),
    )
    for field, fits, expected in shapes:
        if not fits:
            raise ProblemDataError(f"{path}: field {field!r} is not {expected}")


def _is_whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_id_list(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(item, (str, int)) and not isinstance(item, bool) for item in value
    )


def _fields_text(binding: ManifestBinding) -> str:
    return ", ".join((binding.problems_md5, binding.n_problems, binding.problem_order))


def manifest_problems_md5(manifest: Mapping[str, Any], binding: ManifestBinding) -> str:
    return str(manifest.get(binding.problems_md5, ""))


def check_file_md5(path: Path, expected: str, manifest_path: Path, shown: str = "") -> str:
    """The file's md5 when it is `expected`; one line naming the file (`shown`, else its path) and both sums
    otherwise."""
    actual = md5_file(path)
    if actual != expected:
        raise ProblemDataError(
            f"{shown or path}: md5 {actual} differs from the md5 {expected} stated by {manifest_path}: the file is not the "
            "one its manifest describes (stage both files of one revision)"
        )
    return actual


def check_problem_order(ids: Sequence[str], manifest: Mapping[str, Any], binding: ManifestBinding, path: Path) -> None:
    """The problems of `path` are the manifest's `n_problems`, in its `problem_order`."""
    expected_count = manifest.get(binding.n_problems)
    if expected_count != len(ids):
        raise ProblemDataError(f"{path}: {len(ids)} problems, the manifest's {binding.n_problems} is {expected_count}")
    order = [str(item) for item in manifest.get(binding.problem_order) or ()]
    if order != list(ids):
        first = next((i for i, (a, b) in enumerate(zip(ids, order, strict=False)) if a != b), min(len(ids), len(order)))
        found = ids[first] if first < len(ids) else "(end)"
        wanted = order[first] if first < len(order) else "(end)"
        raise ProblemDataError(
            f"{path}: problem {first + 1} is {found}, the manifest's {binding.problem_order} has {wanted} there"
        )
