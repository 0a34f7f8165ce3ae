"""Split one official test case so that no code under test runs while the target exists.

An official test case is a cell like::

    x = f(a)                                  # prelude: runs the code under test
    assert np.allclose(g(x), target)          # compares with `target`

It becomes two parts:

* `prefetch`: the prelude, then every maximal subexpression of the statements that use `target`
  which does not itself involve `target` (callees such as `np.allclose` included), each evaluated
  once, in source order, into a temporary `__scicode_t<k>`. It runs in the shared script namespace,
  like the official script, and is where all code under test runs.
* `residual`: the statements that use `target`, with those subexpressions replaced by their
  temporaries. Its only free names are the temporaries, `target` and names it assigns from `target`
  (`a, b = target`), so it runs in a fresh namespace holding just those, after the harness has
  checked that every temporary is library data or a library function.

Statements after the first use of `target` that do not involve it move into the prefetch part (in
order). Short-circuit operators lose their laziness for the hoisted parts: a test whose first
conjunct fails now also evaluates the second before failing, which never turns a failure into a pass.
Statements or expressions this cannot split (a lambda or comprehension using `target`, storing
`target` into an attribute) raise `RewriteError`; none of the official test cases do.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from stages import safe_ast

TARGET_NAME = "target"
TEMP_PREFIX = "__scicode_t"

_SCOPED = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.NamedExpr,
           ast.Await, ast.Yield, ast.YieldFrom)
_SPLITTABLE = (ast.Assert, ast.Assign, ast.Expr, ast.AnnAssign)


class RewriteError(ValueError):
    """A test case that cannot be split safely."""


@dataclass(frozen=True)
class RewrittenTest:
    index: int
    prefetch: str
    residual: str | None
    temps: tuple[str, ...]
    callee_temps: tuple[str, ...]
    reads_target: bool
    assigned_names: tuple[str, ...]


def _mentions(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(child, ast.Name) and child.id in names for child in ast.walk(node))


def _stored_names(targets: list[ast.expr]) -> set[str]:
    names: set[str] = set()
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, (ast.Attribute, ast.Subscript)):
                raise RewriteError("a statement stores a value derived from `target` into an attribute or item")
            if isinstance(node, ast.Name):
                names.add(node.id)
    return names


def top_level_bindings(tree: ast.Module) -> set[str]:
    """Names a cell binds at top level (assignments, imports, definitions, loop variables)."""
    bound: set[str] = set()
    for statement in tree.body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                bound.add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    bound.add((alias.asname or alias.name).split(".")[0])
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)) and node is not statement:
                continue
    return bound


def star_import_modules(tree: ast.Module) -> tuple[str, ...]:
    return tuple(
        node.module for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and any(alias.name == "*" for alias in node.names)
    )


class _Hoister:
    def __init__(self, counter_start: int) -> None:
        self.counter = counter_start
        self.assignments: list[ast.stmt] = []
        self.temps: list[str] = []
        self.callees: list[str] = []

    def _temp_for(self, node: ast.expr) -> ast.Name:
        name = f"{TEMP_PREFIX}{self.counter}"
        self.counter += 1
        self.assignments.append(ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=node, lineno=0))
        self.temps.append(name)
        return ast.Name(id=name, ctx=ast.Load())

    def expression(self, node: ast.expr, tainted: set[str], *, callee: bool = False) -> ast.expr:
        if not _mentions(node, tainted):
            if isinstance(node, ast.Constant):
                return node
            replacement = self._temp_for(node)
            if callee:
                self.callees.append(replacement.id)
            return replacement
        if isinstance(node, _SCOPED):
            raise RewriteError(f"`target` is used inside a {type(node).__name__}")
        if isinstance(node, ast.Name):
            return node
        if isinstance(node, ast.Call):
            node.func = self.expression(node.func, tainted, callee=True)
            node.args = [self.expression(arg, tainted) for arg in node.args]
            for keyword in node.keywords:
                keyword.value = self.expression(keyword.value, tainted)
            return node
        for field, value in ast.iter_fields(node):
            if isinstance(value, ast.expr):
                setattr(node, field, self.expression(value, tainted))
            elif isinstance(value, list):
                setattr(node, field, [self.expression(item, tainted) if isinstance(item, ast.expr) else item for item in value])
        return node


def rewrite_test(source: str, index: int) -> RewrittenTest:
    """Split test case `index` (0-based) into its prefetch and residual parts."""
    try:
        tree = safe_ast.parse_module(source)
    except SyntaxError as error:
        raise RewriteError(f"test case {index + 1} does not parse: {error.msg} (line {error.lineno})") from None
    assigned = tuple(sorted(top_level_bindings(tree)))
    tainted = {TARGET_NAME}
    first = next((i for i, statement in enumerate(tree.body) if _mentions(statement, tainted)), None)
    if first is None:
        return RewrittenTest(index, source, None, (), (), False, assigned)
    prefetch: list[ast.stmt] = list(tree.body[:first])
    residual: list[ast.stmt] = []
    hoister = _Hoister(0)
    for statement in tree.body[first:]:
        if not _mentions(statement, tainted):
            prefetch.append(statement)
            continue
        if not isinstance(statement, _SPLITTABLE):
            raise RewriteError(f"test case {index + 1}: a {type(statement).__name__} statement uses `target`")
        hoister.assignments = []
        residual.append(_split_statement(statement, hoister, tainted))
        prefetch.extend(hoister.assignments)
    prefetch_module = ast.fix_missing_locations(ast.Module(body=prefetch, type_ignores=[]))
    residual_module = ast.fix_missing_locations(ast.Module(body=residual, type_ignores=[]))
    return RewrittenTest(
        index=index,
        prefetch=ast.unparse(prefetch_module),
        residual=ast.unparse(residual_module),
        temps=tuple(hoister.temps),
        callee_temps=tuple(hoister.callees),
        reads_target=True,
        assigned_names=assigned,
    )


def _split_statement(statement: ast.stmt, hoister: _Hoister, tainted: set[str]) -> ast.stmt:
    if isinstance(statement, ast.Assert):
        statement.test = hoister.expression(statement.test, tainted)
        if statement.msg is not None:
            statement.msg = hoister.expression(statement.msg, tainted)
        return statement
    if isinstance(statement, ast.Expr):
        statement.value = hoister.expression(statement.value, tainted)
        return statement
    if isinstance(statement, ast.AnnAssign):
        if statement.value is None:
            return statement
        statement.value = hoister.expression(statement.value, tainted)
        tainted |= _stored_names([statement.target])
        statement.annotation = ast.Constant(value=None)
        return statement
    assert isinstance(statement, ast.Assign)
    statement.value = hoister.expression(statement.value, tainted)
    tainted |= _stored_names(statement.targets)
    return statement


def rewrite_tests(sources: list[str] | tuple[str, ...]) -> tuple[RewrittenTest, ...]:
    return tuple(rewrite_test(source, index) for index, source in enumerate(sources))


def imported_modules(sources: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Modules the given code imports at any depth (absolute imports only), in first-seen order."""
    found: dict[str, None] = {}
    for source in sources:
        try:
            tree = safe_ast.parse_module(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    found.setdefault(alias.name, None)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.setdefault(node.module, None)
                for alias in node.names:
                    if alias.name != "*":
                        found.setdefault(f"{node.module}.{alias.name}", None)
    return tuple(found)
