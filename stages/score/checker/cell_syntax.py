"""The syntax of a test cell as the split sees it: the names a statement reads and binds (from the compiler's
symbol table when it has nested scopes), imports and the dotted paths they stand for, and the inlining of the
argument-less `test_case_k()` functions a cell defines and calls (`inline_test_functions`).

Trusted, in the doit process: part of the split of each test cell (`rewrite.py`); parses nothing itself.
"""

from __future__ import annotations

import ast
import copy
import importlib
import symtable
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import TypeGuard

INLINED_PREFIX = "__scicode_"
DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_LOOP_TARGETS = (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.Try)

# ---------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------


@lru_cache(maxsize=1 << 15)
def walked_nodes(node: ast.AST) -> tuple[ast.AST, ...]:
    """`ast.walk(node)`, remembered: a cell's statements are walked by many questions. Only trees that are not
    changed after their first walk are asked (the splitter changes a node only after every question about it)."""
    return tuple(ast.walk(node))


def loaded_names(node: ast.AST) -> set[str]:
    return {child.id for child in walked_nodes(node) if isinstance(child, ast.Name)}


def mentions(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(child, ast.Name) and child.id in names for child in walked_nodes(node))


def top_level_bindings(tree: ast.Module) -> set[str]:
    """Names a cell binds at top level (assignments, imports, definitions, loop variables)."""
    bound: set[str] = set()
    for statement in tree.body:
        for node in walked_nodes(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                bound.add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                bound |= import_names(node)
            elif isinstance(node, DEFINITIONS):
                bound.add(node.name)
    return bound


def import_names(node: ast.Import | ast.ImportFrom) -> set[str]:
    return {(alias.asname or alias.name).split(".")[0] for alias in node.names if alias.name != "*"}


@lru_cache(maxsize=64)
def _star_names(module: str) -> tuple[str, ...]:
    """The names `from module import *` binds (empty when the module cannot be imported here)."""
    try:
        imported = importlib.import_module(module)
    except Exception:  # noqa: BLE001 - an unknown module binds nothing the checker could rely on
        return ()
    names = getattr(imported, "__all__", None)
    if names is None:
        names = [name for name in dir(imported) if not name.startswith("_")]
    return tuple(str(name) for name in names)


def import_paths(node: ast.Import | ast.ImportFrom) -> dict[str, str]:
    """Each name an import binds, with the dotted path it stands for."""
    if isinstance(node, ast.Import):
        return {
            (alias.asname or alias.name.split(".")[0]): (alias.name if alias.asname else alias.name.split(".")[0])
            for alias in node.names
        }
    if node.level or not node.module:
        return {}
    paths: dict[str, str] = {}
    for alias in node.names:
        if alias.name == "*":
            paths.update({name: f"{node.module}.{name}" for name in _star_names(node.module)})
        else:
            paths[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return paths


def within(path: str, prefixes: Iterable[str]) -> str | None:
    """The prefix (of whole dotted components) `path` falls under, if any."""
    for prefix in prefixes:
        if path == prefix or path.startswith(prefix + "."):
            return prefix
    return None


def function_globals(function: ast.FunctionDef) -> set[str]:
    """Names a function reads that it neither receives nor assigns (a conservative over-approximation)."""
    arguments = function.args
    local = {arg.arg for arg in arguments.posonlyargs + arguments.args + arguments.kwonlyargs}
    local |= {arg.arg for arg in (arguments.vararg, arguments.kwarg) if arg is not None}
    for node in walked_nodes(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            local.add(node.id)
        elif isinstance(node, ast.arg):
            local.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            local |= import_names(node)
        elif isinstance(node, DEFINITIONS) and node is not function:
            local.add(node.name)
    return {
        node.id for node in walked_nodes(function) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
    } - local


def root_name(node: ast.AST) -> str | None:
    """`x` of `x`, `x.a`, `x[0]`, `x.a[1].b`."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def dotted_name(node: ast.AST) -> tuple[str, list[str]] | None:
    """(`np`, [`random`, `rand`]) of `np.random.rand`; None for anything but a name and attributes."""
    attributes: list[str] = []
    while isinstance(node, ast.Attribute):
        attributes.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return node.id, attributes[::-1]


def name_chains(node: ast.AST) -> list[tuple[ast.expr, bool]]:
    """Every maximal name/attribute chain under `node`, with whether it is the function of a call."""
    called: set[int] = set()
    inner: set[int] = set()
    found: list[ast.expr] = []
    for child in walked_nodes(node):
        if isinstance(child, ast.Call):
            called.add(id(child.func))
        if isinstance(child, ast.Attribute):
            inner.add(id(child.value))
    for child in walked_nodes(node):
        if isinstance(child, (ast.Name, ast.Attribute)) and id(child) not in inner:
            found.append(child)
    return [(chain, id(chain) in called) for chain in found]


# ---------------------------------------------------------------------------
# Scopes of one statement (exact, from the compiler's symbol table)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class StatementSymbols:
    reads: frozenset[str]  # names the statement reads at module level, now or in any nested scope
    binds: frozenset[str]  # names it binds at module level
    late: frozenset[str]  # globals read by the functions and lambdas it defines (read when they are called)


def _nested_globals(table: symtable.SymbolTable) -> tuple[set[str], set[str]]:
    """(globals read by nested functions and lambdas, globals read by other nested scopes: comprehensions,
    classes), over every scope below `table`."""
    late: set[str] = set()
    now: set[str] = set()
    for child in table.get_children():
        names = {symbol.get_name() for symbol in child.get_symbols() if symbol.is_global() and symbol.is_referenced()}
        deferred = child.get_type() == "function" and not child.get_name().endswith("comp")
        (late if deferred else now).update(names)
        child_late, child_now = _nested_globals(child)
        late |= child_late
        (late if deferred else now).update(child_now)
    return late, now


def statement_symbols(statement: ast.stmt) -> StatementSymbols:
    nodes = _module_level(statement)
    if len(nodes) == sum(1 for _ in walked_nodes(statement)):  # no nested scope: the names are the syntax's
        return _plain_symbols(statement, nodes)
    table = symtable.symtable(ast.unparse(statement), "<scicode-cell>", "exec")
    symbols = table.get_symbols()
    reads = {symbol.get_name() for symbol in symbols if symbol.is_referenced()}
    binds = {symbol.get_name() for symbol in symbols if symbol.is_assigned() or symbol.is_imported()}
    for node in _module_level(statement):
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            reads.add(node.target.id)  # `x += 1` reads x (the symbol table marks it assigned only)
    if isinstance(statement, _LOOP_TARGETS):
        reads -= _loop_targets(statement)
    late, now = _nested_globals(table)
    return StatementSymbols(frozenset(reads | late | now), frozenset(binds), frozenset(late))


def _plain_symbols(statement: ast.stmt, nodes: list[ast.AST]) -> StatementSymbols:
    """`statement_symbols` of a statement without nested scopes, read off its syntax tree."""
    reads: set[str] = set()
    binds: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Name):
            (reads if isinstance(node.ctx, ast.Load) else binds).add(node.id)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            reads.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            binds |= import_names(node)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            binds.add(node.name)
    if isinstance(statement, _LOOP_TARGETS):
        reads -= _loop_targets(statement)
    return StatementSymbols(frozenset(reads), frozenset(binds), frozenset())


_NESTED_SCOPES = (*DEFINITIONS, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _module_level(statement: ast.stmt) -> list[ast.AST]:
    """The nodes of a statement that run in the module's scope (not inside a function, lambda, class or
    comprehension it contains)."""
    if isinstance(statement, _NESTED_SCOPES):
        return []
    found: list[ast.AST] = []
    pending: list[ast.AST] = [statement]
    while pending:
        node = pending.pop()
        found.append(node)
        pending.extend(child for child in ast.iter_child_nodes(node) if not isinstance(child, _NESTED_SCOPES))
    return found


def _loop_targets(statement: ast.stmt) -> set[str]:
    """Names a compound statement binds before its body reads them (loop variables, `as` names)."""
    targets: list[ast.AST] = []
    for node in walked_nodes(statement):
        if isinstance(node, (ast.For, ast.AsyncFor)):
            targets.append(node.target)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            targets.append(node.optional_vars)
    names = {name.id for target in targets for name in walked_nodes(target) if isinstance(name, ast.Name)}
    names |= {node.name for node in walked_nodes(statement) if isinstance(node, ast.ExceptHandler) and node.name}
    return names


# ---------------------------------------------------------------------------
# Inlining `test_case_k()` calls
# ---------------------------------------------------------------------------


def _inlinable(statement: ast.stmt) -> TypeGuard[ast.FunctionDef]:
    if not isinstance(statement, ast.FunctionDef) or statement.decorator_list:
        return False
    arguments = statement.args
    if arguments.posonlyargs or arguments.args or arguments.kwonlyargs or arguments.vararg or arguments.kwarg:
        return False
    forbidden = (ast.Return, ast.Yield, ast.YieldFrom, ast.Global, ast.Nonlocal, *DEFINITIONS)
    nodes = list(walked_nodes(statement))[1:]
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
        for node in walked_nodes(statement)
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del))
    }
    prefix = f"{INLINED_PREFIX}{function.name}_"
    for statement in body:
        for node in walked_nodes(statement):
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
        for node in walked_nodes(statement)
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
