"""Split one official test case between the test process (model code) and the checker (verdicts).

An official test case is a cell like::

    x = f(a)                                  # runs the code under test
    assert np.allclose(g(x), target)          # compares with `target`

It becomes two programs:

* `prefetch` runs in the untrusted test process, in the shared script namespace, like the official
  script: every statement as written, except the *checked* statements (every `assert`, and every
  statement that uses `target` or a name assigned from it). Each checked statement is replaced by
  captures of its *model-side* subexpressions, in source order: `__scicode_capture("__scicode_t0", g(x))`
  sends the value of `g(x)` (as plain data, `wire.py`) at that point of the cell.
* `check` runs in the trusted checker, which never runs model code: the cell's imports and the
  functions it defines that the comparisons call, then the checked statements with every model-side
  subexpression replaced by its captured value: `assert np.allclose(__scicode_t0, target)`.

Which parts stay in the checker: names bound by `required_dependencies`, builtins, the cell's own
imports, `target` and names assigned from it, and functions the cell defines when a comparison passes
them a target-derived value (their globals must be checker names too); any expression built from those
with operators, calls, attributes and subscripts. Everything else is model-side: a name the model or the
cell's other statements bound (e.g. `x`), an attribute or item of such a value (`block.length`), a call
of such a function (`f(a)`); each is captured whole, at the largest expression that does not use a
target-derived name.

A cell that calls, at top level and without arguments, a function it defines that contains asserts (the
`test_case_1()` cells of 78.1/78.2) has that call replaced by the function's body, with its local names
renamed, so that those asserts are checked too. A cell this cannot split raises `RewriteError` (the step
is an `eval_error`): a target-derived value passed to model code (`f(target)`), `target` inside a
lambda or comprehension, a compound statement using `target`, an assert inside a compound statement.
None of the 1082 official test cases does any of these.
"""

from __future__ import annotations

import ast
import builtins
import copy
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeGuard

from stages import safe_ast

TARGET_NAME = "target"
TEMP_PREFIX = "__scicode_t"
CAPTURE_FUNCTION = "__scicode_capture"
INLINED_PREFIX = "__scicode_"

_SCOPED = (
    ast.Lambda,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
    ast.NamedExpr,
    ast.Await,
    ast.Yield,
    ast.YieldFrom,
)
_SPLITTABLE = (ast.Assert, ast.Assign, ast.Expr, ast.AnnAssign)
_NESTED_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
BUILTIN_NAMES = frozenset(dir(builtins))


class RewriteError(ValueError):
    """A test case that cannot be split safely."""


@dataclass(frozen=True)
class RewrittenTest:
    index: int
    prefetch: str
    check: str | None  # None: the cell checks nothing (no assert, no target)
    temps: tuple[str, ...]  # captured value names, in capture order
    reads_target: bool


# ---------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------


def _loaded_names(node: ast.AST) -> set[str]:
    return {child.id for child in ast.walk(node) if isinstance(child, ast.Name)}


def _mentions(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(child, ast.Name) and child.id in names for child in ast.walk(node))


def top_level_bindings(tree: ast.Module) -> set[str]:
    """Names a cell binds at top level (assignments, imports, definitions, loop variables)."""
    bound: set[str] = set()
    for statement in tree.body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                bound.add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                bound |= _import_names(node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
    return bound


def _import_names(node: ast.Import | ast.ImportFrom) -> set[str]:
    return {(alias.asname or alias.name).split(".")[0] for alias in node.names if alias.name != "*"}


def checker_names(deps_source: str) -> frozenset[str]:
    """Names the checker binds for every cell: builtins and what `required_dependencies` imports."""
    try:
        tree = safe_ast.parse_module(deps_source)
    except SyntaxError:
        return BUILTIN_NAMES
    return BUILTIN_NAMES | frozenset(top_level_bindings(tree))


def _stored_names(targets: list[ast.expr]) -> set[str]:
    names: set[str] = set()
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, (ast.Attribute, ast.Subscript)):
                raise RewriteError("a statement stores a value derived from `target` into an attribute or item")
            if isinstance(node, ast.Name):
                names.add(node.id)
    return names


def _function_globals(function: ast.FunctionDef) -> set[str]:
    """Names a function reads that it neither receives nor assigns (a conservative over-approximation)."""
    arguments = function.args
    local = {arg.arg for arg in arguments.posonlyargs + arguments.args + arguments.kwonlyargs}
    local |= {arg.arg for arg in (arguments.vararg, arguments.kwarg) if arg is not None}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            local.add(node.id)
        elif isinstance(node, ast.arg):
            local.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            local |= _import_names(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not function:
            local.add(node.name)
    return {
        node.id for node in ast.walk(function) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
    } - local


# ---------------------------------------------------------------------------
# Inlining `test_case_k()` calls
# ---------------------------------------------------------------------------


def _inlinable(statement: ast.stmt) -> TypeGuard[ast.FunctionDef]:
    if not isinstance(statement, ast.FunctionDef) or statement.decorator_list:
        return False
    arguments = statement.args
    if arguments.posonlyargs or arguments.args or arguments.kwonlyargs or arguments.vararg or arguments.kwarg:
        return False
    forbidden = (
        ast.Return,
        ast.Yield,
        ast.YieldFrom,
        ast.Global,
        ast.Nonlocal,
        ast.FunctionDef,
        ast.AsyncFunctionDef,
        ast.ClassDef,
    )
    nodes = list(ast.walk(statement))[1:]
    return any(isinstance(node, ast.Assert) for node in nodes) and not any(
        isinstance(node, forbidden) for node in nodes
    )


def _called_without_arguments(statement: ast.stmt, names: Iterable[str]) -> str | None:
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        call = statement.value
        if isinstance(call.func, ast.Name) and call.func.id in names and not call.args and not call.keywords:
            return call.func.id
    return None


def _inlined_body(function: ast.FunctionDef) -> list[ast.stmt]:
    body = copy.deepcopy(function.body)
    local = {
        node.id
        for statement in body
        for node in ast.walk(statement)
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del))
    }
    prefix = f"{INLINED_PREFIX}{function.name}_"
    for statement in body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and node.id in local:
                node.id = prefix + node.id
    return body


def inline_test_functions(tree: ast.Module) -> ast.Module:
    """Replace `test_case_k()` statements by the body of the argument-less function the cell defines."""
    inlinable = {statement.name: statement for statement in tree.body if _inlinable(statement)}
    if not inlinable:
        return tree
    other_uses = {
        node.id
        for statement in tree.body
        if not _called_without_arguments(statement, inlinable)
        for node in ast.walk(statement)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
    }
    body: list[ast.stmt] = []
    for statement in tree.body:
        name = _called_without_arguments(statement, inlinable)
        if name:
            body.extend(_inlined_body(inlinable[name]))
        elif not (
            isinstance(statement, ast.FunctionDef) and statement.name in inlinable and statement.name not in other_uses
        ):
            body.append(statement)  # a definition used only by the inlined calls is dropped with its asserts
    return ast.Module(body=body, type_ignores=[])


# ---------------------------------------------------------------------------
# Splitting the checked statements
# ---------------------------------------------------------------------------


class _Splitter:
    """Turns checked statements into captures (test process) and a residual (checker)."""

    def __init__(self, trusted: set[str], test_functions: dict[str, ast.FunctionDef]) -> None:
        self.trusted = trusted
        self.tainted = {TARGET_NAME}
        self.test_functions = test_functions
        self.checker_functions: dict[str, ast.FunctionDef] = {}
        self.captures: list[ast.stmt] = []
        self.temps: list[str] = []

    # -- classification -----------------------------------------------------------
    def _checker_name(self, name: str) -> bool:
        return name in self.trusted or name in self.tainted

    def _has_model_part(self, node: ast.AST) -> bool:
        return any(not self._checker_name(name) for name in _loaded_names(node))

    def _is_model_value(self, node: ast.AST) -> bool:
        """A model-side name, or an attribute, item or call result reached from one."""
        if isinstance(node, ast.Name):
            return not self._checker_name(node.id)
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            return self._is_model_value(node.value)
        if isinstance(node, ast.Call):
            return self._is_model_value(node.func)
        return False

    # -- rewriting ---------------------------------------------------------------
    def _capture(self, node: ast.expr) -> ast.Name:
        name = f"{TEMP_PREFIX}{len(self.temps)}"
        self.temps.append(name)
        if isinstance(node, ast.GeneratorExp):
            node = ast.Call(func=ast.Name(id="tuple", ctx=ast.Load()), args=[node], keywords=[])
        call = ast.Call(
            func=ast.Name(id=CAPTURE_FUNCTION, ctx=ast.Load()), args=[ast.Constant(name), node], keywords=[]
        )
        self.captures.append(ast.Expr(value=call))
        return ast.Name(id=name, ctx=ast.Load())

    def expression(self, node: ast.expr) -> ast.expr:
        if not self._has_model_part(node):
            return node
        tainted_here = _mentions(node, self.tainted)
        if not tainted_here and (self._is_model_value(node) or isinstance(node, _SCOPED)):
            return self._capture(node)
        if isinstance(node, _SCOPED):
            raise RewriteError(f"`target` is used inside a {type(node).__name__}")
        if isinstance(node, ast.Call):
            return self._call(node)
        for field, value in ast.iter_fields(node):
            if isinstance(value, ast.expr):
                setattr(node, field, self.expression(value))
            elif isinstance(value, list):
                setattr(node, field, [self.expression(item) if isinstance(item, ast.expr) else item for item in value])
            elif isinstance(value, ast.keyword):
                value.value = self.expression(value.value)
        return node

    def _call(self, node: ast.Call) -> ast.Call:
        function = node.func
        if isinstance(function, ast.Name) and function.id in self.test_functions:
            self._use_test_function(function.id)
        elif self._is_model_value(function):
            raise RewriteError(f"a target-derived value is passed to code under test ({ast.unparse(function)[:80]})")
        else:
            node.func = self.expression(function)
        node.args = [self.expression(argument) for argument in node.args]
        for keyword in node.keywords:
            keyword.value = self.expression(keyword.value)
        return node

    def _use_test_function(self, name: str) -> None:
        function = self.test_functions[name]
        foreign = _function_globals(function) - self.trusted - set(self.test_functions)
        if foreign:
            raise RewriteError(
                f"the test function {name} compares target-derived values using {sorted(foreign)[:5]} "
                "(names the checker cannot have)"
            )
        self.checker_functions[name] = function
        for other in _function_globals(function) & set(self.test_functions):
            if other not in self.checker_functions:
                self._use_test_function(other)

    def statement(self, statement: ast.stmt, index: int) -> ast.stmt:
        if not isinstance(statement, _SPLITTABLE):
            raise RewriteError(f"test case {index + 1}: a {type(statement).__name__} statement uses `target`")
        if isinstance(statement, ast.Assert):
            statement.test = self.expression(statement.test)
            if statement.msg is not None:
                statement.msg = self.expression(statement.msg)
        elif isinstance(statement, ast.Expr):
            statement.value = self.expression(statement.value)
        elif isinstance(statement, ast.AnnAssign):
            if statement.value is not None:
                statement.value = self.expression(statement.value)
                self.tainted |= _stored_names([statement.target])
            statement.annotation = ast.Constant(value=None)
        else:
            statement.value = self.expression(statement.value)
            self.tainted |= _stored_names(statement.targets)
        return statement


def _is_checked(statement: ast.stmt, tainted: set[str]) -> bool:
    return isinstance(statement, ast.Assert) or _mentions(statement, tainted)


def _nested_assert(statement: ast.stmt) -> bool:
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return False
    return any(isinstance(node, ast.Assert) for node in list(ast.walk(statement))[1:])


def rewrite_test(source: str, index: int, trusted: frozenset[str] = BUILTIN_NAMES) -> RewrittenTest:
    """Split test case `index` (0-based); `trusted`: the checker's names (see `checker_names`)."""
    try:
        tree = inline_test_functions(safe_ast.parse_module(source))
    except SyntaxError as error:
        raise RewriteError(f"test case {index + 1} does not parse: {error.msg} (line {error.lineno})") from None
    imports = [statement for statement in tree.body if isinstance(statement, (ast.Import, ast.ImportFrom))]
    assigned = top_level_bindings(
        ast.Module(body=[s for s in tree.body if not isinstance(s, (ast.Import, ast.ImportFrom))], type_ignores=[])
    )
    imported = set().union(*(_import_names(statement) for statement in imports)) if imports else set()
    test_functions = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
    trusted_here = (set(trusted) | imported) - (assigned - imported)
    splitter = _Splitter(trusted_here, test_functions)
    prefetch: list[ast.stmt] = []
    residual: list[ast.stmt] = []
    reads_target = _mentions(tree, {TARGET_NAME})
    for statement in tree.body:
        if not _is_checked(statement, splitter.tainted):
            if _nested_assert(statement):
                raise RewriteError(f"test case {index + 1}: an assert inside a {type(statement).__name__} statement")
            prefetch.append(statement)
            continue
        splitter.captures = []
        residual.append(splitter.statement(statement, index))
        prefetch.extend(splitter.captures)
    check = None
    if residual:
        definitions = [s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name in splitter.checker_functions]
        check = ast.unparse(
            ast.fix_missing_locations(ast.Module(body=imports + definitions + residual, type_ignores=[]))
        )
    return RewrittenTest(
        index=index,
        prefetch=ast.unparse(ast.fix_missing_locations(ast.Module(body=prefetch, type_ignores=[]))),
        check=check,
        temps=tuple(splitter.temps),
        reads_target=reads_target,
    )


def rewrite_tests(sources: list[str] | tuple[str, ...], deps_source: str = "") -> tuple[RewrittenTest, ...]:
    trusted = checker_names(deps_source)
    return tuple(rewrite_test(source, index, trusted) for index, source in enumerate(sources))


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
