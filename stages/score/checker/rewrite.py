"""Split one official test case between the test process (model code) and the checker (verdicts).

An official test case is a cell like::

    x0 = np.linspace(0, 1, 5)                 # inputs and expected values, built from literals
    expected = np.sin(x0)
    x = f(x0)                                 # runs the code under test
    assert np.allclose(x, expected)           # compares
    assert np.allclose(g(x), target)          # compares with `target`

It becomes two programs:

* `prefetch` runs in the untrusted test process, in the shared script namespace, like the official
  script: every statement as written, except the *checked* statements (every `assert`, and every
  statement that uses `target` or a name assigned from it). Each checked statement is replaced by
  captures of its *model-side* subexpressions, in source order: `__scicode_capture("__scicode_t0", x)`
  sends the value of `x` (as plain data, `shared/wire.py`) at that point of the cell.
* `check` runs in the trusted checker, which never runs model code: the cell's imports, the statements
  it evaluates itself (below), then the checked statements with every model-side subexpression replaced
  by its captured value: `assert np.allclose(__scicode_t0, expected)`.

**Only values computed by model code cross.** The checker evaluates, itself, every statement that uses
only literals, builtins, the modules and names of `required_dependencies` (`checker_scope`), the cell's
own imports and names bound earlier in the cell by statements it evaluates (`x0` and `expected` above;
functions the cell defines from those; `target` and names derived from it); it runs those a checked
statement needs (directly or through others). A statement that calls model code or uses a value it
returned is model-side: it runs only in the test process, and what it binds is captured where a checked
statement uses it. Consequences:

* Model code cannot change what the checker compares with: passing `x0` to `f` (which may change it in
  place, or reach the cell's names through its caller's frame) changes the test process's copy only.
* A statement of the cell that itself changes one of its values with a model value (`x[0] = f(1)`,
  `x.append(f(y))`, `x += f(y)`, `np.copyto(x, f(y))`) makes that value model-side, with every value
  the cell may have made share storage with it (names that occur together in a statement the checker
  evaluates).
* Random draws (`np.random`, `random`, their generators; `RANDOM_STATES`) are evaluated by the checker
  only while their state is known to it: after the cell seeded it (`np.random.seed(k)`, `random.seed(k)`,
  `np.random.default_rng(k)`) and before the next call into model code, which may consume the same state.
  Any other draw (after a model call, or from a state the cell did not seed, which earlier model code
  has already used) stays in the test process, as does a draw inside a checked statement.
* Calls that depend on the process rather than on their arguments (`TEST_PROCESS_ONLY`: the clock,
  the namespace, files, `id`, `hash`) stay in the test process.

A cell that calls, at top level and without arguments, a function it defines that contains asserts (the
`test_case_1()` cells of 78.1/78.2) has that call replaced by the function's body, with its local names
renamed, so that those asserts are checked too. A cell this cannot split raises `RewriteError` (the step
is an `eval_error`): a target-derived value passed to model code (`f(target)`), `target` inside a
lambda or comprehension, a compound statement using `target`, an assert inside a compound statement.
None of the 1082 official test cases does any of these.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass
from functools import lru_cache

from stages.execution import safe_ast
from stages.score.checker.cell_flow import BUILTIN_NAMES, TARGET_NAME, Binding, CellFlow, CheckerScope, Evaluated
from stages.score.checker.cell_syntax import (
    DEFINITIONS,
    function_globals,
    inline_test_functions,
    loaded_names,
    mentions,
    statement_symbols,
    walked_nodes,
)

__all__ = [
    "CAPTURE_FUNCTION",
    "TEMP_PREFIX",
    "CheckerScope",
    "RewriteError",
    "RewrittenTest",
    "checker_scope",
    "imported_modules",
    "rewrite_test",
    "rewrite_tests",
]

TEMP_PREFIX = "__scicode_t"
CAPTURE_FUNCTION = "__scicode_capture"

SCOPED = (
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
SPLITTABLE = (ast.Assert, ast.Assign, ast.Expr, ast.AnnAssign)


class RewriteError(ValueError):
    """A test case that cannot be split safely."""


@dataclass(frozen=True)
class RewrittenTest:
    index: int
    prefetch: str
    check: str | None  # None: the cell checks nothing (no assert, no target)
    temps: tuple[str, ...]  # captured value names, in capture order
    reads_target: bool
    evaluated: int = 0  # statements of the cell the checker evaluates itself (besides imports and checks)
    random_in_test_process: bool = False  # a random draw stayed in the test process (RNG state unknown)


# ---------------------------------------------------------------------------
# Splitting the checked statements
# ---------------------------------------------------------------------------


class _Splitter:
    """Turns checked statements into captures (test process) and a residual (checker)."""

    def __init__(self, flow: CellFlow, test_functions: dict[str, ast.FunctionDef]) -> None:
        self.flow = flow
        self.trusted: set[str] = set()
        self.tainted: set[str] = {TARGET_NAME}
        self.test_functions = test_functions
        self.checker_functions: dict[str, ast.FunctionDef] = {}
        self.captures: list[ast.stmt] = []
        self.temps: list[str] = []

    # -- classification -----------------------------------------------------------
    def _checker_name(self, name: str) -> bool:
        return name in self.trusted or name in self.tainted

    def _draws(self, node: ast.AST) -> bool:
        """Evaluating `node` draws from a random state: always in the test process, whose state is the
        official one (the checker would draw from its own)."""
        return bool(self.flow.drawn_states(node, loaded_names(node)))

    def _has_model_part(self, node: ast.AST) -> bool:
        return any(not self._checker_name(name) for name in loaded_names(node)) or self._draws(node)

    def _is_model_value(self, node: ast.AST) -> bool:
        """A model-side name, or an attribute, item or call result reached from one (or a random draw)."""
        if isinstance(node, ast.Name):
            return not self._checker_name(node.id) or bool(self.flow.states_of_use(node.id))
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            if self.flow.random_state(self.flow.qualified(node)) is not None:
                return True
            return self._is_model_value(node.value)
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id in self.test_functions:
                # the cell's own function given model values runs with them (their methods are model code), in
                # the test process; given target-derived values it runs in the checker (`_use_test_function`)
                arguments = [*node.args, *(keyword.value for keyword in node.keywords)]
                model_side = not self._checker_name(node.func.id) or any(map(self._has_model_part, arguments))
                return model_side and not mentions(node, self.tainted)
            return self._is_model_value(node.func)
        return False

    # -- rewriting ---------------------------------------------------------------
    def _capture(self, node: ast.expr) -> ast.Name:
        if self._draws(node) and all(self._checker_name(name) for name in loaded_names(node)):
            self.flow.random_in_test_process = True
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
        tainted_here = mentions(node, self.tainted)
        if not tainted_here and (self._is_model_value(node) or isinstance(node, SCOPED)):
            return self._capture(node)
        if isinstance(node, SCOPED):
            raise RewriteError(f"`target` is used inside a {type(node).__name__}")
        if isinstance(node, ast.Call):
            return self._call(node)
        for field_name, value in ast.iter_fields(node):
            if isinstance(value, ast.expr):
                setattr(node, field_name, self.expression(value))
            elif isinstance(value, list):
                setattr(
                    node, field_name, [self.expression(item) if isinstance(item, ast.expr) else item for item in value]
                )
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
        foreign = function_globals(function) - self.trusted - set(self.test_functions)
        if foreign or not self.flow.trusted(name):
            shown = sorted(foreign)[:5] or [name]
            raise RewriteError(
                f"the test function {name} compares target-derived values using {shown} (names the checker cannot have)"
            )
        self.checker_functions[name] = function
        for other in function_globals(function) & set(self.test_functions):
            if other not in self.checker_functions:
                self._use_test_function(other)

    def statement(self, statement: ast.stmt, index: int) -> ast.stmt:
        if not isinstance(statement, SPLITTABLE):
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


def _stored_names(targets: list[ast.expr]) -> set[str]:
    names: set[str] = set()
    for target in targets:
        for node in walked_nodes(target):
            if isinstance(node, (ast.Attribute, ast.Subscript)):
                raise RewriteError("a statement stores a value derived from `target` into an attribute or item")
            if isinstance(node, ast.Name):
                names.add(node.id)
    return names


def _is_checked(statement: ast.stmt, tainted: set[str]) -> bool:
    return isinstance(statement, ast.Assert) or mentions(statement, tainted)


def _nested_assert(statement: ast.stmt) -> bool:
    if isinstance(statement, DEFINITIONS):
        return False
    return any(isinstance(node, ast.Assert) for node in list(walked_nodes(statement))[1:])


# ---------------------------------------------------------------------------
# The checker's deps, and one cell
# ---------------------------------------------------------------------------


def _classify(flow: CellFlow, position: int, statement: ast.stmt) -> str:
    """Record an unchecked statement of a cell (or of the dependencies) in `flow`: "import", "evaluated" (the
    checker can evaluate it itself) or "model" (it runs in the test process only)."""
    symbols = statement_symbols(statement)
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        flow.evaluate(position, statement, symbols)
        return "import"
    if flow.evaluable(statement, symbols):
        flow.evaluate(position, statement, symbols)
        return "evaluated"
    flow.run_model_side(statement, symbols)
    return "model"


@lru_cache(maxsize=256)
def checker_scope(deps_source: str) -> CheckerScope:
    """What the checker binds from `required_dependencies`: its imports, and each of its other statements
    that the checker can evaluate itself (the rest run in the test process only, and their names are
    model-side, like a cell's)."""
    empty = CheckerScope(BUILTIN_NAMES, {}, "")
    try:
        tree = safe_ast.parse_module(deps_source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return empty
    flow = CellFlow(empty)
    kinds = [_classify(flow, position, statement) for position, statement in enumerate(tree.body)]
    names = {  # a generator or function bound here is left to the test process (model code uses it first)
        name
        for name, binding in flow.bindings.items()
        if flow.trusted(name) and not binding.states and not binding.defined
    }
    qualified = {name: binding.path for name, binding in flow.bindings.items() if binding.path and name in names}
    program = [statement for kind, statement in zip(kinds, tree.body) if kind != "model"]
    return CheckerScope(
        BUILTIN_NAMES | frozenset(names),
        qualified,
        ast.unparse(ast.fix_missing_locations(ast.Module(body=program, type_ignores=[]))),
    )


def _needed(evaluated: list[Evaluated], residuals: list[tuple[int, set[str], set[str]]], flow: CellFlow) -> set[int]:
    """Positions of the evaluated statements the checked ones need: walking back from the last checked
    statement, a statement is needed when it mentions a name of a needed group or draws from a needed state."""
    marks = sorted(
        [(item.position, "evaluated", item.names, item.states) for item in evaluated]
        + [(position, "residual", frozenset(names), frozenset(states)) for position, names, states in residuals],
        key=lambda mark: mark[0],
        reverse=True,
    )
    groups: set[str] = set()
    states: set[str] = set()
    needed: set[int] = set()
    for position, kind, names, drawn in marks:
        if kind == "residual" or names & groups or drawn & states:
            if kind == "evaluated":
                needed.add(position)
            groups |= flow.group_of(flow.cell_names(names))
            states |= drawn
    return needed


def rewrite_test(source: str, index: int, scope: CheckerScope | None = None) -> RewrittenTest:
    """Split test case `index` (0-based); `scope`: what the checker binds (see `checker_scope`)."""
    scope = scope or checker_scope("")
    try:
        tree = inline_test_functions(safe_ast.parse_module(source))
    except SyntaxError as error:
        raise RewriteError(f"test case {index + 1} does not parse: {error.msg} (line {error.lineno})") from None
    flow = CellFlow(scope)
    splitter = _Splitter(flow, {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)})
    kinds: list[tuple[str, ast.stmt]] = []
    residuals: list[tuple[int, set[str], set[str]]] = []
    prefetch: list[ast.stmt] = []
    for position, statement in enumerate(tree.body):
        if not _is_checked(statement, flow.tainted()):
            if _nested_assert(statement):
                raise RewriteError(f"test case {index + 1}: an assert inside a {type(statement).__name__} statement")
            kinds.append((_classify(flow, position, statement), statement))
            prefetch.append(statement)
            continue
        splitter.trusted = flow.trusted_names()
        splitter.tainted = flow.tainted()
        splitter.captures = []
        residual = splitter.statement(copy.deepcopy(statement), index)
        kinds.append(("residual", residual))
        prefetch.extend(splitter.captures)
        for name in splitter.tainted - flow.tainted():
            flow.bind([name], Binding("tainted"))
        used = loaded_names(residual) - set(splitter.temps)
        for function in splitter.checker_functions.values():
            used |= function_globals(function) | {function.name}
        residuals.append((position, used, flow.drawn_states(residual, used)))
        if splitter.captures:
            flow.run_model_side(ast.Module(body=splitter.captures, type_ignores=[]), None)
    check = None
    evaluated = 0
    if any(kind == "residual" for kind, _ in kinds):
        needed = _needed(flow.evaluated, residuals, flow)
        evaluated = len(needed)
        body = [
            statement
            for position, (kind, statement) in enumerate(kinds)
            if kind in ("import", "residual") or (kind == "evaluated" and position in needed)
        ]
        check = ast.unparse(ast.fix_missing_locations(ast.Module(body=body, type_ignores=[])))
    return RewrittenTest(
        index=index,
        prefetch=ast.unparse(ast.fix_missing_locations(ast.Module(body=prefetch, type_ignores=[]))),
        check=check,
        temps=tuple(splitter.temps),
        reads_target=mentions(tree, {TARGET_NAME}),
        evaluated=evaluated,
        random_in_test_process=flow.random_in_test_process,
    )


def rewrite_tests(sources: list[str] | tuple[str, ...], deps_source: str = "") -> tuple[RewrittenTest, ...]:
    scope = checker_scope(deps_source)
    return tuple(rewrite_test(source, index, scope) for index, source in enumerate(sources))


def imported_modules(sources: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Modules the given code imports at any depth (absolute imports only), in first-seen order."""
    found: dict[str, None] = {}
    for source in sources:
        try:
            tree = safe_ast.parse_module(source)
        except SyntaxError:
            continue
        for node in walked_nodes(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    found.setdefault(alias.name, None)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.setdefault(node.module, None)
                for alias in node.names:
                    if alias.name != "*":
                        found.setdefault(f"{node.module}.{alias.name}", None)
    return tuple(found)
