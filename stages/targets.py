"""Targets: which HDF5 file of expected values the scorer reads, and deriving one from reference code.

The official `test_data.h5` holds, for every scored step, the value each test case compares with
`target`. When it is absent, the steps of problems that ship reference code (the validation split) can
get targets derived here, in the official layout:

1. `compared_expression(test_case)` finds, by AST, the expression the test's assert compares with
   `target` (`np.allclose(f(x), target)`, `f(x) == target`, `(f(x) == target).all()`,
   `f(x)[0] ~ target[0] and f(x)[1] ~ target[1]`, `a, b = target` + asserts on `a` and `b`, ...).
2. Each step runs in a fresh isolated process: required dependencies, the reference code of steps
   1..k (prefilled steps: their official file), then the step's test cases in order in one namespace,
   each with its target-reading assert replaced by a capture of the compared expression (evaluated
   once). The child turns every captured value into the official HDF5 layout (the dispatch of the
   official `save_data_to_hdf5`) and pickles that layout back through a temp file.
3. The parent writes all layouts into one HDF5 file atomically, plus a schema-validated record
   (`derived_targets.json`) whose fingerprint covers the problem file, the prefilled files, this
   module's source and the numeric library versions.

`resolve_targets(settings)` then picks official/explicit targets from the download manifest, else
current derived targets, else reports them missing. It never hashes the large HDF5 file.
"""
from __future__ import annotations

import ast
import builtins
import hashlib
import io
import json
import os
import pickle
import platform
import sys
import tempfile
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Literal, Sequence

from stages.artifacts import fingerprint, read_artifact, sha256_file, write_artifact
from stages.fingerprints import FingerprintParts
from stages.config import Settings
from stages.isolation import Limits, ProcessResult, ScratchDir, run_isolated, scrubbed_environment
from stages.paths import PROJECT_ROOT, DataPaths
from stages.pins import pins, prefilled_steps, split_files
from stages.problems import Problem, Step, load_split, prefilled_code
from stages.safe_ast import parse_module
from stages.versions import package_versions

TargetsKind = Literal["official", "explicit", "derived", "missing"]
ComparisonKind = Literal["compared", "no_target", "unsupported"]
StepStatus = Literal["ok", "error", "timeout", "crashed"]
DerivationStatus = Literal["complete", "partial", "failed"]

RECORD_KIND = "targets"
DERIVATION_FORMAT = 1  # bump when the layout or the evaluation protocol changes
TARGET_NAME = "target"
CAPTURE_NAME = "__scicode_capture_target__"
GZIP_MIN_BYTES = 4096  # arrays at least this large are stored gzip-compressed (level 9, shuffled)
GZIP_LEVEL = 9
HELPER_PACKAGE = "scicode"  # test cases import comparison helpers from it; derivation never calls them
ENVIRONMENT_PACKAGES = ("numpy", "scipy", "sympy", "h5py")
CHILD_OUTPUT_LIMIT = 16 * 1024
EQUALITY_OPERATORS = (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)


class TargetsError(RuntimeError):
    """Derived targets could not be produced; the message says why."""


class DerivationError(ValueError):
    """One step's targets could not be derived (unsupported test, unwritable value, ...)."""


# ---------------------------------------------------------------------------
# Finding the expression a test case compares with `target`
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class TargetComparison:
    """What one test case does with `target`.

    kind: `compared` (expression is what the assert compares with target), `no_target` (the test never
    reads target), `unsupported` (it reads target in a way this finder does not understand; see reason).
    """

    kind: ComparisonKind
    expression: ast.expr | None = None
    assert_node: ast.Assert | None = None
    alias_statements: tuple[ast.stmt, ...] = ()
    pattern: str = ""
    reason: str = ""


@dataclass(frozen=True)
class _Aliases:
    """Names bound from `target`: `target` itself -> (), `a, b = target` -> a: (0,), b: (1,)."""

    paths: dict[str, tuple[int, ...]]
    statements: tuple[ast.stmt, ...]
    unpacked_length: int | None


@dataclass(frozen=True)
class _Match:
    value: ast.expr  # the value-side expression
    path: tuple[int, ...]  # which part of target it equals: () whole, (i,) item i
    target_side: ast.expr  # the target-side node consumed by this match


def compared_expression(test_case_source: str) -> ast.expr | None:
    """The expression the test case's assert compares with `target`; None when there is none.

    For `a, b = target` followed by asserts on `a` and `b`, the result is the tuple of the two
    compared expressions. Use `find_target_comparison` to tell "never reads target" from "unsupported".
    """
    return find_target_comparison(test_case_source).expression


def find_target_comparison(test_case: str | ast.Module) -> TargetComparison:
    """Classify one test case and, when it compares something with `target`, find that expression."""
    try:
        tree = parse_module(test_case) if isinstance(test_case, str) else test_case
    except SyntaxError as error:
        return TargetComparison("unsupported", reason=f"test case does not parse: {error.msg} (line {error.lineno})")
    aliases = _target_aliases(tree)
    reading_asserts = [
        node for node in ast.walk(tree) if isinstance(node, ast.Assert) and _reads_any(node.test, aliases.paths)
    ]
    outside = _reads_outside(tree, aliases, reading_asserts)
    if not reading_asserts and not outside and not aliases.statements:
        return TargetComparison("no_target", pattern="no target")
    if outside:
        return TargetComparison("unsupported", reason=f"reads target outside an assert (line {outside[0].lineno})")
    if len(reading_asserts) != 1:
        return TargetComparison(
            "unsupported", reason=f"{len(reading_asserts)} asserts read target; expected exactly one"
        )
    assert_node = reading_asserts[0]
    try:
        expression = _combine(_collect_matches(assert_node.test, aliases), assert_node.test, aliases)
    except DerivationError as error:
        return TargetComparison("unsupported", assert_node=assert_node, reason=str(error))
    return TargetComparison(
        "compared",
        expression=expression,
        assert_node=assert_node,
        alias_statements=aliases.statements,
        pattern=comparison_pattern(assert_node.test, aliases),
    )


def _target_aliases(tree: ast.AST) -> _Aliases:
    paths: dict[str, tuple[int, ...]] = {TARGET_NAME: ()}
    statements: list[ast.stmt] = []
    unpacked_length: int | None = None
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and _is_target_name(node.value) and len(node.targets) == 1):
            continue
        bound = node.targets[0]
        if isinstance(bound, ast.Name):
            paths[bound.id] = ()
            statements.append(node)
        elif isinstance(bound, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name) for e in bound.elts):
            paths.update({element.id: (index,) for index, element in enumerate(bound.elts)})  # type: ignore[union-attr]
            statements.append(node)
            unpacked_length = len(bound.elts)
    return _Aliases(paths, tuple(statements), unpacked_length)


def _is_target_name(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == TARGET_NAME and isinstance(node.ctx, ast.Load)


def _name_reads(node: ast.AST, names: dict[str, tuple[int, ...]] | Iterable[str]) -> list[ast.Name]:
    wanted = set(names)
    return [n for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in wanted]


def _reads_any(node: ast.AST, names: dict[str, tuple[int, ...]]) -> bool:
    return bool(_name_reads(node, names))


def _reads_outside(tree: ast.AST, aliases: _Aliases, asserts: list[ast.Assert]) -> list[ast.Name]:
    """Reads of `target` itself outside the target-reading asserts and the alias assignments."""
    inside = {id(n) for node in (*asserts, *aliases.statements) for n in ast.walk(node)}
    return [n for n in _name_reads(tree, [TARGET_NAME]) if id(n) not in inside]


def _target_path(node: ast.expr, aliases: _Aliases) -> tuple[int, ...] | None:
    """Which part of target `node` denotes: `target` -> (), `target[1]` or alias `b` -> (1,); else None."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in aliases.paths:
        return aliases.paths[node.id]
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and type(node.slice.value) is int:
        inner = _target_path(node.value, aliases)
        return None if inner is None else inner + (node.slice.value,)
    return None


def _mentions(node: ast.AST, aliases: _Aliases) -> bool:
    return _reads_any(node, aliases.paths)


def _same(a: ast.AST, b: ast.AST) -> bool:
    return ast.dump(a) == ast.dump(b)


def _match_pair(left: ast.expr, right: ast.expr, aliases: _Aliases) -> list[_Match] | None:
    """Interpret `left ~ right` as "value equals (part of) target"; None when it is not such a pair."""
    left_reads, right_reads = _mentions(left, aliases), _mentions(right, aliases)
    if left_reads == right_reads:
        return None
    symmetric = _match_same_wrapper(left, right, aliases)
    if symmetric is not None:
        return symmetric
    value, target_side = (right, left) if left_reads else (left, right)
    path = _target_path(target_side, aliases)
    return None if path is None else [_Match(value, path, target_side)]


def _match_same_wrapper(left: ast.expr, right: ast.expr, aliases: _Aliases) -> list[_Match] | None:
    """`f(x)[0] ~ target[0]`, `g(x).any() ~ target.any()`, `(b, c) ~ (bb, cc)`: unwrap both sides alike."""
    if type(left) is not type(right):
        return None
    if isinstance(left, ast.Subscript) and _same(left.slice, right.slice):  # type: ignore[attr-defined]
        return _match_pair(left.value, right.value, aliases)  # type: ignore[attr-defined]
    if isinstance(left, ast.Attribute) and left.attr == right.attr:  # type: ignore[attr-defined]
        return _match_pair(left.value, right.value, aliases)  # type: ignore[attr-defined]
    if isinstance(left, ast.Call):
        return _match_same_call(left, right, aliases)  # type: ignore[arg-type]
    if isinstance(left, (ast.Tuple, ast.List)) and len(left.elts) == len(right.elts):  # type: ignore[attr-defined]
        matches: list[_Match] = []
        for a, b in zip(left.elts, right.elts):  # type: ignore[attr-defined]
            if _same(a, b):
                continue
            pair = _match_pair(a, b, aliases)
            if pair is None:
                return None
            matches.extend(pair)
        return matches or None
    return None


def _match_same_call(left: ast.Call, right: ast.Call, aliases: _Aliases) -> list[_Match] | None:
    if len(left.args) != len(right.args) or not _same(ast.List(left.keywords), ast.List(right.keywords)):
        return None
    if isinstance(left.func, ast.Attribute) and isinstance(right.func, ast.Attribute):
        if left.func.attr != right.func.attr or not all(_same(a, b) for a, b in zip(left.args, right.args)):
            return None
        return _match_pair(left.func.value, right.func.value, aliases)  # `x.any()` ~ `target.any()`
    if not _same(left.func, right.func):
        return None
    differing = [(a, b) for a, b in zip(left.args, right.args) if not _same(a, b)]
    return _match_pair(*differing[0], aliases) if len(differing) == 1 else None


def _collect_matches(node: ast.expr, aliases: _Aliases) -> list[_Match]:
    """Every value/target pair inside an assert's test, outermost comparison first."""
    pair: list[_Match] | None = None
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], EQUALITY_OPERATORS):
        pair = _match_pair(node.left, node.comparators[0], aliases)
    elif isinstance(node, ast.Call) and len(node.args) >= 2:
        pair = _match_pair(node.args[0], node.args[1], aliases)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub):
        pair = _match_pair(node.left, node.right, aliases)
    if pair is not None:
        return pair
    matches: list[_Match] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.expr):
            matches.extend(_collect_matches(child, aliases))
    return matches


def _combine(matches: list[_Match], test: ast.expr, aliases: _Aliases) -> ast.expr:
    """One expression for the whole target: the common value, or the tuple of the per-item values."""
    consumed = {id(n) for match in matches for n in _name_reads(match.target_side, aliases.paths)}
    stray = [n for n in _name_reads(test, aliases.paths) if id(n) not in consumed]
    if not matches or stray:
        where = ast.unparse(stray[0]) if stray else ast.unparse(test)
        raise DerivationError(f"cannot tell what `{where}` is compared with in `assert {ast.unparse(test)}`")
    whole = [m for m in matches if m.path == ()]
    if whole:
        if len(whole) != len(matches) or any(not _same(m.value, whole[0].value) for m in whole):
            raise DerivationError(f"target is compared with different expressions in `assert {ast.unparse(test)}`")
        return whole[0].value
    if any(len(m.path) != 1 for m in matches):
        raise DerivationError(f"nested parts of target are compared in `assert {ast.unparse(test)}`")
    length = aliases.unpacked_length if aliases.unpacked_length is not None else 1 + max(m.path[0] for m in matches)
    items: list[ast.expr] = []
    for index in range(length):
        values = [m.value for m in matches if m.path == (index,)]
        if not values or any(not _same(v, values[0]) for v in values):
            raise DerivationError(f"item {index} of target is not compared exactly once in `assert {ast.unparse(test)}`")
        items.append(values[0])
    return ast.Tuple(elts=items, ctx=ast.Load())


def comparison_pattern(test: ast.expr, aliases: _Aliases | None = None) -> str:
    """The shape of an assert's test with every sub-expression that does not read target shown as `E`."""
    aliases = aliases or _Aliases({TARGET_NAME: ()}, (), None)
    prefix = f"{aliases.unpacked_length} names unpacked from target; " if aliases.unpacked_length else ""
    return prefix + _shape(test, aliases)


def _shape(node: ast.expr, aliases: _Aliases) -> str:
    if not _mentions(node, aliases):
        return "E"
    if isinstance(node, ast.Name):
        path = aliases.paths[node.id]
        return "target" + "".join(f"[{i}]" for i in path)
    if isinstance(node, ast.Call):
        func = ast.unparse(node.func) if not _mentions(node.func, aliases) else _shape(node.func, aliases)
        parts = [_shape(a, aliases) for a in node.args] + [f"{k.arg}=E" for k in node.keywords]
        return f"{func}({', '.join(parts)})"
    if isinstance(node, ast.Compare):
        operators = "".join(f" {_OPERATOR_TEXT.get(type(op), type(op).__name__)} {_shape(c, aliases)}"
                            for op, c in zip(node.ops, node.comparators))
        return _shape(node.left, aliases) + operators
    if isinstance(node, ast.BoolOp):
        joiner = " and " if isinstance(node.op, ast.And) else " or "
        return "(" + joiner.join(_shape(v, aliases) for v in node.values) + ")"
    if isinstance(node, ast.Subscript):
        return f"{_shape(node.value, aliases)}[{ast.unparse(node.slice)}]"
    if isinstance(node, ast.Attribute):
        return f"{_shape(node.value, aliases)}.{node.attr}"
    if isinstance(node, (ast.Tuple, ast.List)):
        return "(" + ", ".join(_shape(e, aliases) for e in node.elts) + ")"
    if isinstance(node, ast.UnaryOp):
        return f"{type(node.op).__name__.lower()}({_shape(node.operand, aliases)})"
    if isinstance(node, ast.BinOp):
        return f"({_shape(node.left, aliases)} {type(node.op).__name__} {_shape(node.right, aliases)})"
    return f"{type(node).__name__}(...)"


_OPERATOR_TEXT = {ast.Eq: "==", ast.NotEq: "!=", ast.Is: "is", ast.IsNot: "is not", ast.Lt: "<", ast.LtE: "<=",
                  ast.Gt: ">", ast.GtE: ">="}


def survey_comparisons(test_cases: Iterable[str]) -> Counter[str]:
    """How many test cases show each comparison pattern (`no target`, `unsupported: ...` included)."""
    counts: Counter[str] = Counter()
    for source in test_cases:
        comparison = find_target_comparison(source)
        counts[comparison.pattern if comparison.kind != "unsupported" else f"unsupported: {comparison.reason}"] += 1
    return counts


# ---------------------------------------------------------------------------
# Turning a test case into a capture of its compared expression
# ---------------------------------------------------------------------------

class _Replace(ast.NodeTransformer):
    def __init__(self, replacements: dict[int, ast.stmt]) -> None:
        self.replacements = replacements

    def visit(self, node: ast.AST) -> ast.AST:
        replacement = self.replacements.get(id(node))
        if replacement is not None:
            return ast.copy_location(replacement, node)
        return super().visit(node)


def capture_program(test_case_source: str, capture_name: str = CAPTURE_NAME) -> tuple[ast.Module, TargetComparison]:
    """The test case with its target-reading assert replaced by `capture_name(<compared expression>)`.

    `a, b = target` statements become `pass`; imports of the official comparison helpers are dropped
    (derivation never compares), and it is an error if the remaining code still uses them.
    """
    tree = parse_module(test_case_source)
    comparison = find_target_comparison(tree)
    if comparison.kind == "unsupported":
        raise DerivationError(comparison.reason)
    replacements: dict[int, ast.stmt] = {id(s): ast.Pass() for s in comparison.alias_statements}
    if comparison.kind == "compared":
        call = ast.Call(func=ast.Name(capture_name, ast.Load()), args=[comparison.expression], keywords=[])
        replacements[id(comparison.assert_node)] = ast.Expr(call)
    helper_names: set[str] = set()
    for node in ast.walk(tree):
        if _imports_helper_package(node):
            replacements[id(node)] = ast.Pass()
            helper_names.update(alias.asname or alias.name.split(".")[0] for alias in node.names)  # type: ignore[attr-defined]
    program = ast.fix_missing_locations(_Replace(replacements).visit(tree))
    still_used = sorted({n.id for n in _name_reads(program, helper_names)})
    if still_used:
        raise DerivationError(f"test case uses the comparison helper {still_used[0]} outside the target assert")
    return program, comparison  # type: ignore[return-value]


def _imports_helper_package(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").split(".")[0] == HELPER_PACKAGE and node.level == 0
    if isinstance(node, ast.Import):
        return any(alias.name.split(".")[0] == HELPER_PACKAGE for alias in node.names)
    return False


# ---------------------------------------------------------------------------
# The official HDF5 layout (the dispatch of the official `save_data_to_hdf5` / `save_dict_to_hdf5`)
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class H5Dataset:
    data: Any  # a numpy array, numpy scalar, Python scalar or str


@dataclass(frozen=True)
class H5Group:
    members: tuple[tuple[str, "H5Dataset | H5Group"], ...]


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
        members += [("indices", H5Dataset(matrix.indices)), ("indptr", H5Dataset(matrix.indptr)),
                    ("blocksize", H5Dataset(np.array(matrix.blocksize)))]
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


@lru_cache(maxsize=None)
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


def _compression(data: Any) -> dict[str, Any]:
    import numpy as np

    if isinstance(data, np.ndarray) and data.ndim > 0 and data.nbytes >= GZIP_MIN_BYTES and data.dtype.kind in "biufc":
        return {"compression": "gzip", "compression_opts": GZIP_LEVEL, "shuffle": True}
    return {}


def write_targets_file(path: Path, steps: dict[str, Sequence[H5Group]]) -> str:
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


# ---------------------------------------------------------------------------
# One step, evaluated in a fresh child process
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class StepJob:
    step_id: str
    preamble: tuple[tuple[str, str], ...]  # (label, code): dependencies, then steps 1..k
    test_cases: tuple[str, ...]


@dataclass(frozen=True)
class StepOutcome:
    step_id: str
    status: StepStatus
    tests: int
    duration_s: float
    reason: str = ""
    layouts: tuple[H5Group, ...] = field(default=(), repr=False)

    def summary(self) -> dict[str, Any]:
        return {"step_id": self.step_id, "status": self.status, "tests": self.tests,
                "duration_s": round(self.duration_s, 3), "reason": self.reason}


def step_jobs(data_paths: DataPaths, problems: Iterable[Problem]) -> list[StepJob]:
    """One job per scored step of every problem that ships reference code."""
    jobs: list[StepJob] = []
    for problem in problems:
        if not problem.has_reference_code:
            continue
        preamble: list[tuple[str, str]] = [(f"<{problem.problem_id} required_dependencies>", problem.required_dependencies)]
        for step in problem.steps:
            preamble.append((f"<{step.step_id} reference code>", _reference_code(data_paths, step)))
            if not step.prefilled:
                jobs.append(StepJob(step.step_id, tuple(preamble), step.test_cases))
    return jobs


def _reference_code(data_paths: DataPaths, step: Step) -> str:
    if step.prefilled:
        code = prefilled_code(data_paths, step.step_id)
        if code is None:
            raise TargetsError(f"prefilled step {step.step_id} has no official code file")
        return code
    if not step.ground_truth_code:
        raise TargetsError(f"step {step.step_id} has no ground_truth_code")
    return step.ground_truth_code


def evaluate_step(job: StepJob) -> tuple[H5Group, ...]:
    """Run the job in this process (the child's work): the layout of every test case's target."""
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    for label, code in job.preamble:
        exec(compile(code, label, "exec"), namespace)  # noqa: S102 - reference code, in an isolated child
    layouts: list[H5Group] = []
    for index, source in enumerate(job.test_cases):
        label = f"<{job.step_id} test{index + 1}>"
        try:
            program, comparison = capture_program(source)
        except DerivationError as error:
            raise DerivationError(f"{label}: {error}") from None
        captured: list[Any] = []
        namespace[CAPTURE_NAME] = captured.append
        exec(compile(program, label, "exec"), namespace)  # noqa: S102
        expected_captures = 1 if comparison.kind == "compared" else 0
        if len(captured) != expected_captures:
            raise DerivationError(f"{label}: the compared expression ran {len(captured)} times, expected {expected_captures}")
        layouts.append(layout_of_test(captured[0] if captured else None))
    namespace.pop(CAPTURE_NAME, None)
    return tuple(layouts)


def child_main(job_path: str) -> int:
    """Entry point of the child process: read the job, evaluate it, pickle the result next to it."""
    job_file = Path(job_path)
    spec = json.loads(job_file.read_text(encoding="utf-8"))
    job = StepJob(spec["step_id"], tuple(tuple(p) for p in spec["preamble"]), tuple(spec["test_cases"]))  # type: ignore[arg-type]
    try:
        result: dict[str, Any] = {"status": "ok", "layouts": evaluate_step(job)}
    except BaseException as error:  # noqa: BLE001 - every failure (even SystemExit) is reported, not raised
        # Running out of memory depends on the limit and the load, not only on the code: not deterministic.
        status = "crashed" if isinstance(error, MemoryError) else "error"
        result = {"status": status, "reason": _error_line(error) + _error_location(error)}
    output = Path(spec["output"])
    partial = output.with_suffix(".partial")
    with open(partial, "wb") as stream:
        pickle.dump(result, stream, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(partial, output)
    return 0 if result["status"] == "ok" else 1


def _error_line(error: BaseException) -> str:
    message = str(error).strip()
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return text.splitlines()[0][:500]


def _error_location(error: BaseException) -> str:
    """` (at <10.3 test2> line 4)`: the innermost frame in reference code or a test case, if any."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if frame.filename.startswith("<")]
    return f" (at {frames[-1].filename} line {frames[-1].lineno})" if frames else ""


CHILD_ENTRY = "import sys; from stages.targets import child_main; sys.exit(child_main(sys.argv[1]))"


def run_step_isolated(job: StepJob, scratch: Path, limits: Limits) -> StepOutcome:
    """Evaluate one step in a fresh isolated interpreter; a crash or timeout becomes that step's status."""
    folder = scratch / _safe_step_name(job.step_id)
    folder.mkdir(parents=True)
    output = folder / "result.pickle"
    job_file = folder / "job.json"
    job_file.write_text(json.dumps({"step_id": job.step_id, "preamble": job.preamble,
                                    "test_cases": job.test_cases, "output": str(output)}), encoding="utf-8")
    env = scrubbed_environment({"PYTHONPATH": str(PROJECT_ROOT)}, home=folder)
    process = run_isolated([sys.executable, "-c", CHILD_ENTRY, str(job_file)], cwd=folder, env=env, limits=limits)
    return _outcome(job, process, output, limits)


def _safe_step_name(step_id: str) -> str:
    return "step-" + "".join(ch if ch.isalnum() else "_" for ch in step_id)


def _outcome(job: StepJob, process: ProcessResult, output: Path, limits: Limits) -> StepOutcome:
    tests, duration = len(job.test_cases), process.duration_s
    if process.timed_out:
        return StepOutcome(job.step_id, "timeout", tests, duration, f"timed out after {limits.timeout_seconds:g} s")
    if not output.is_file():
        return StepOutcome(job.step_id, "crashed", tests, duration, _crash_reason(process))
    with open(output, "rb") as stream:
        result = pickle.load(stream)  # written by our own child process
    if result["status"] != "ok":
        return StepOutcome(job.step_id, result["status"], tests, duration, result["reason"])
    return StepOutcome(job.step_id, "ok", tests, duration, layouts=tuple(result["layouts"]))


def _crash_reason(process: ProcessResult) -> str:
    signal_number = process.killed_by_signal
    cause = f"killed by signal {signal_number}" if signal_number else f"exit code {process.returncode}"
    last = [line for line in process.stderr.splitlines() if line.strip()]
    return f"{cause} without a result" + (f": {last[-1].strip()[:300]}" if last else "")


# ---------------------------------------------------------------------------
# The derive stage
# ---------------------------------------------------------------------------

def derived_record_path(data_paths: DataPaths) -> Path:
    return data_paths.derived_targets.with_suffix(".json")


def derived_targets_fingerprint(settings: Settings) -> str:
    """sha256 over every input of the derived targets: problem and prefilled files, this code, libraries."""
    return fingerprint(_fingerprint_inputs(settings.data_paths))


def derived_targets_fingerprint_parts(settings: Settings) -> FingerprintParts:
    """`derived_targets_fingerprint` and what it covers by named part (no setting: inputs, code, libraries)."""
    covered = _fingerprint_inputs(settings.data_paths)
    files = {**covered["problems"], **covered["prefilled"]}
    return FingerprintParts(fingerprint(covered), inputs={name: sha and sha[:16] for name, sha in files.items()},
                            code={"targets derivation": covered["code"], "format": str(covered["format"])},
                            libraries=dict(covered["environment"]))


def _fingerprint_inputs(data_paths: DataPaths) -> dict[str, Any]:
    problems_file = data_paths.file(split_files()["validation"])
    return {
        "format": DERIVATION_FORMAT,
        "problems": {problems_file.name: _small_file_sha256(problems_file)},
        "prefilled": {name: _small_file_sha256(data_paths.file(name)) for name in sorted(prefilled_steps().values())},
        "code": _code_sha256(),
        "environment": environment_versions(),
    }


def _small_file_sha256(path: Path) -> str | None:
    """sha256 of a small data file (problem jsonl, prefilled code); None when it is not staged."""
    try:
        return sha256_file(path)
    except FileNotFoundError:
        return None


@lru_cache(maxsize=1)
def _code_sha256() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


@lru_cache(maxsize=1)
def environment_versions() -> dict[str, str]:
    """Interpreter and numeric library versions (from package metadata: no import)."""
    return {"python": platform.python_version(), **package_versions(ENVIRONMENT_PACKAGES)}


def derived_targets_current(settings: Settings) -> bool:
    """Up to date: the record validates, carries the current fingerprint, and its file is in place.

    A `partial` record counts as current only when every failed step failed deterministically
    (`error`); steps that timed out or crashed are retried on the next run.
    """
    record = read_artifact(derived_record_path(settings.data_paths), RECORD_KIND)
    return record is not None and _record_usable(record, settings) and record["fingerprint"] == derived_targets_fingerprint(settings)


def _record_usable(record: dict[str, Any], settings: Settings) -> bool:
    if record["status"] == "failed":
        return False
    if any(step["status"] in ("timeout", "crashed") for step in record["steps"]):
        return False
    try:
        return settings.data_paths.derived_targets.stat().st_size == record["size"]
    except OSError:
        return False


def derive_targets(settings: Settings) -> dict[str, Any]:
    """Derive the targets of every validation step from reference code; returns the written record.

    An up-to-date record is returned as is. Steps run longest-first on `score_workers` isolated
    processes; a step that fails, crashes or times out is reported in the record (status `partial`)
    and has no group in the file.
    """
    data_paths = settings.data_paths
    record_path = derived_record_path(data_paths)
    if derived_targets_current(settings):
        return read_artifact(record_path, RECORD_KIND)  # type: ignore[return-value]
    started = time.monotonic()
    problems = [p for p in load_split(data_paths, "validation") if p.has_reference_code]
    jobs = step_jobs(data_paths, problems)
    if not jobs:
        raise TargetsError(f"no problem in {split_files()['validation']} ships reference code: nothing to derive")
    previous = read_artifact(record_path, RECORD_KIND)
    outcomes = run_step_jobs(jobs, settings, expected_durations(previous))
    record_path.unlink(missing_ok=True)  # a stale record must not describe the new file
    ordered = [outcomes[job.step_id] for job in jobs]
    succeeded = {o.step_id: o.layouts for o in ordered if o.status == "ok"}
    target_path = data_paths.derived_targets
    digest = write_targets_file(target_path, succeeded)
    record = _derivation_record(settings, problems, ordered, digest, target_path, time.monotonic() - started)
    return write_artifact(record_path, RECORD_KIND, record)


def expected_durations(previous_record: dict[str, Any] | None) -> dict[str, float]:
    """Expected step durations, to start the longest steps first.

    Measured by the previous derivation when there is one; else the optional `reference_step_seconds`
    table of pins.json (seconds per step id, measured once); steps in neither are ordered by code size.
    """
    durations = {str(k): float(v) for k, v in pins().get("reference_step_seconds", {}).items()}
    for step in (previous_record or {}).get("steps", []):
        durations[step["step_id"]] = float(step["duration_s"])
    return durations


def longest_first(jobs: Sequence[StepJob], durations: dict[str, float]) -> list[StepJob]:
    """Steps with an expected duration first, longest first; then the others, largest code first."""
    def cost(job: StepJob) -> tuple[bool, float, int]:
        code_size = sum(len(code) for _, code in job.preamble) + sum(len(test) for test in job.test_cases)
        return (job.step_id in durations, durations.get(job.step_id, 0.0), code_size)

    return sorted(jobs, key=cost, reverse=True)


def run_step_jobs(jobs: Sequence[StepJob], settings: Settings, durations: dict[str, float]) -> dict[str, StepOutcome]:
    """Every job in its own isolated process, `score_workers` at a time, with a progress bar on stderr."""
    from tqdm import tqdm

    limits = Limits(timeout_seconds=settings.step_timeout_seconds, memory_mb=settings.step_memory_mb,
                    output_limit_bytes=CHILD_OUTPUT_LIMIT)
    outcomes: dict[str, StepOutcome] = {}
    with ScratchDir(None, "scicode-targets-") as scratch, \
            ThreadPoolExecutor(max_workers=settings.score_workers) as pool, \
            tqdm(total=len(jobs), desc="derive targets", unit="step", file=sys.stderr, leave=False) as progress:
        futures = {pool.submit(run_step_isolated, job, scratch, limits): job for job in longest_first(jobs, durations)}
        for future in as_completed(futures):
            outcome = future.result()
            outcomes[outcome.step_id] = outcome
            progress.set_postfix_str(f"{outcome.step_id} {outcome.status}", refresh=False)
            progress.update()
    return outcomes


def _derivation_record(
    settings: Settings,
    problems: Sequence[Problem],
    outcomes: Sequence[StepOutcome],
    digest: str,
    target_path: Path,
    duration: float,
) -> dict[str, Any]:
    failed = [o for o in outcomes if o.status != "ok"]
    status: DerivationStatus = "complete" if not failed else ("failed" if len(failed) == len(outcomes) else "partial")
    inputs = _fingerprint_inputs(settings.data_paths)
    parts = derived_targets_fingerprint_parts(settings)
    no_target = sum(
        1 for step in (s for p in problems for s in p.scored_steps) for case in step.test_cases
        if find_target_comparison(case).kind == "no_target"
    )
    return {
        **parts.record(),
        "status": status,
        "file": target_path.name,
        "sha256": digest,
        "size": target_path.stat().st_size,
        "inputs": inputs,
        "layout": {"gzip_min_bytes": GZIP_MIN_BYTES, "gzip_level": GZIP_LEVEL},
        "counts": {
            "problems": len(problems),
            "steps": len(outcomes),
            "steps_ok": len(outcomes) - len(failed),
            "steps_failed": len(failed),
            "tests": sum(o.tests for o in outcomes),
            "tests_without_target": no_target,
        },
        "steps": [o.summary() for o in outcomes],
        "duration_s": round(duration, 3),
    }


# ---------------------------------------------------------------------------
# Which targets the scorer uses
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ResolvedTargets:
    kind: TargetsKind
    path: Path | None
    sha256: str | None
    note: str


def resolve_targets(settings: Settings) -> ResolvedTargets:
    """Official or explicit targets from the download manifest, else current derived targets, else missing.

    With `h5py_file=` set, only that file counts: when the manifest does not describe it, targets are missing.

    Cheap: reads two small JSON records and stats files; the sha256 comes from those records.
    """
    data_paths = settings.data_paths
    from_manifest, manifest_note = _manifest_targets(settings)
    if from_manifest is not None:
        return from_manifest
    if settings.explicit_targets_file() is not None:  # an explicit file is never silently replaced
        return ResolvedTargets("missing", None, None, manifest_note)
    record = read_artifact(derived_record_path(data_paths), RECORD_KIND)
    if record is not None and derived_targets_current(settings):
        failed = [s["step_id"] for s in record["steps"] if s["status"] != "ok"]
        note = f"{record['counts']['steps_ok']} validation steps"
        if failed:
            note += f"; no targets for {len(failed)} steps whose derivation failed: {', '.join(failed)}"
        return ResolvedTargets("derived", data_paths.derived_targets, record["sha256"], note)
    derived_note = ("derived targets are out of date (run the targets stage)" if record is not None
                    else "no derived targets")
    return ResolvedTargets("missing", None, None, f"{manifest_note}; {derived_note}")


def _manifest_targets(settings: Settings) -> tuple[ResolvedTargets | None, str]:
    manifest = read_artifact(settings.data_paths.manifest, "manifest")
    if manifest is None:
        return None, "no download manifest"
    targets = manifest["targets"]
    kind, path_text = targets["kind"], targets.get("path")
    explicit = settings.explicit_targets_file()
    if explicit is not None and (kind != "explicit" or path_text != str(explicit)):
        return None, f"the download manifest does not describe h5py_file={settings.h5py_file} (run the download stage)"
    if kind not in ("official", "explicit"):
        return None, targets.get("note") or f"official targets {kind}"
    path = Path(path_text)
    if not path.is_file():
        return None, f"the {kind} targets file {path} listed in the download manifest is gone"
    return ResolvedTargets(kind, path, targets.get("sha256"), targets.get("note") or f"{kind} targets"), ""


# ---------------------------------------------------------------------------
# Comparing two targets files (derived against official, or two derivations)
# ---------------------------------------------------------------------------

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
        for step_id in (list(steps) if steps is not None else list(want.keys())):
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
        return [f"{want.name}: stored as {got.dtype} {got.shape} {storage(got)}, expected {want.dtype} {want.shape} {storage(want)}"]
    a, b = got[()], want[()]
    if want.dtype.kind in "OSUb":
        equal = bool(np.array_equal(a, b)) if isinstance(b, np.ndarray) else a == b
    else:
        equal = bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))
    return [] if equal else [f"{want.name}: values differ beyond rtol={rtol:g} atol={atol:g}"]


# ---------------------------------------------------------------------------
# Command line: `python -m stages.targets [data_dir]`
# ---------------------------------------------------------------------------

def main(argv: Sequence[str]) -> int:
    """`python -m stages.targets [data_dir]`: derive the targets and print the record's counts."""
    from stages.config import load_settings

    settings = load_settings({"data_dir": argv[0]} if argv else {})
    record = derive_targets(settings)
    print(json.dumps({"status": record["status"], "counts": record["counts"],
                      "failed": [s for s in record["steps"] if s["status"] != "ok"]}, indent=2))
    return 0 if record["status"] == "complete" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
