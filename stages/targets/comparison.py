"""Which expression a test case compares with `target`, found by AST, and the capture program built from it.

`compared_expression(test_case)` finds the expression the test's assert compares with `target`
(`np.allclose(f(x), target)`, `f(x) == target`, `(f(x) == target).all()`,
`f(x)[0] ~ target[0] and f(x)[1] ~ target[1]`, `a, b = target` + asserts on `a` and `b`, ...);
`capture_program` replaces that assert by a capture of the compared expression (evaluated once).
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from stages.execution.safe_ast import parse_module
from stages.targets.errors import DerivationError

ComparisonKind = Literal["compared", "no_target", "unsupported"]

TARGET_NAME = "target"
CAPTURE_NAME = "__scicode_capture_target__"
HELPER_PACKAGE = "scicode"  # test cases import comparison helpers from it; derivation never calls them
EQUALITY_OPERATORS = (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)


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
            names = [element for element in bound.elts if isinstance(element, ast.Name)]
            paths.update({element.id: (index,) for index, element in enumerate(names)})
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
    if len(left.args) != len(right.args) or [ast.dump(k) for k in left.keywords] != [
        ast.dump(k) for k in right.keywords
    ]:
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
            raise DerivationError(
                f"item {index} of target is not compared exactly once in `assert {ast.unparse(test)}`"
            )
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
        operators = "".join(
            f" {_OPERATOR_TEXT.get(type(op), type(op).__name__)} {_shape(c, aliases)}"
            for op, c in zip(node.ops, node.comparators)
        )
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


_OPERATOR_TEXT = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
}


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
        visited: ast.AST = super().visit(node)  # generic_visit: no visit_<kind> method here removes a node
        return visited


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
    if comparison.kind == "compared" and comparison.expression is not None:
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
