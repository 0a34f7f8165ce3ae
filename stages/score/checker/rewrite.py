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
  sends the value of `x` (as plain data, `wire.py`) at that point of the cell.
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
import builtins
import copy
import importlib
import symtable
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, TypeGuard

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
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_LOOP_TARGETS = (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.Try)

# Builtins the checker has too. Dunder names differ between the two processes (`__name__` is the module's
# name in the test process and the builtins module's in the checker), so they are not among them.
BUILTIN_NAMES = frozenset(name for name in dir(builtins) if not name.startswith("_"))

# Random states, by the module path whose functions draw from them (a prefix of dotted paths). scipy's
# random functions draw from numpy's global state unless given a `random_state`.
RANDOM_STATES: Mapping[str, str] = {
    "numpy.random": "numpy.random",
    "random": "random",
    "scipy.stats": "numpy.random",
    "scipy.sparse.random": "numpy.random",
    "scipy.sparse.rand": "numpy.random",
    "scipy.sparse.random_array": "numpy.random",
    "scipy.optimize.basinhopping": "numpy.random",
    "scipy.optimize.differential_evolution": "numpy.random",
    "scipy.optimize.dual_annealing": "numpy.random",
    "scipy.linalg.interpolative": "numpy.random",
}
# Calls that (re)start a global random state when given a seed.
RANDOM_SEEDERS: Mapping[str, str] = {"numpy.random.seed": "numpy.random", "random.seed": "random"}
# Calls that build a new random generator (deterministic when given a seed); they do not draw.
RANDOM_CONSTRUCTORS = frozenset(
    (
        "numpy.random.default_rng numpy.random.RandomState numpy.random.Generator numpy.random.SeedSequence "
        "numpy.random.PCG64 numpy.random.PCG64DXSM numpy.random.MT19937 numpy.random.Philox "
        "numpy.random.SFC64 random.Random"
    ).split()
)
# Methods of a generator that give another generator sharing its state.
RANDOM_SHARING_METHODS = frozenset({"spawn", "jumped", "bit_generator"})
# A state nobody can know (a generator seeded from the operating system's entropy).
UNKNOWABLE_STATE = "entropy"

# What depends on the process rather than on arguments (module path prefixes and builtins): stays in the
# test process.
TEST_PROCESS_ONLY = tuple(
    (
        "os sys time datetime uuid secrets pickle importlib builtins gc inspect ctypes threading "
        "multiprocessing subprocess io pathlib shutil tempfile socket signal resource random.SystemRandom"
    ).split()
)
TEST_PROCESS_ONLY_BUILTINS = frozenset(
    {"eval", "exec", "compile", "globals", "locals", "vars", "breakpoint", "input", "open", "id", "hash", "help"}
)
# Methods that never change the object they are called on: a model-side statement calling one on a value
# the checker holds leaves that value the checker's.
NON_MUTATING_METHODS = frozenset(
    (
        "copy astype reshape flatten ravel transpose conj conjugate dot sum prod mean std var min max argmin "
        "argmax cumsum cumprod all any round tolist item tobytes toarray todense tocsr tocsc tocoo keys "
        "values items get count index format split join strip upper lower replace startswith endswith"
    ).split()
)

# Calls that change their (positional) arguments in place; any call given `out=` changes that argument,
# and a ufunc's `.at` method its first.
IN_PLACE_CALLS = frozenset(
    (
        "numpy.copyto numpy.fill_diagonal numpy.put numpy.place numpy.putmask numpy.put_along_axis "
        "numpy.random.shuffle random.shuffle builtins.setattr builtins.delattr builtins.exec operator.setitem "
        "operator.delitem operator.iadd operator.isub operator.imul operator.itruediv"
    ).split()
)
IN_PLACE_METHODS = frozenset({"at"})

Status = Literal["trusted", "model", "tainted"]


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


@dataclass(frozen=True)
class CheckerScope:
    """What the checker binds before any cell: builtins, and what it runs of `required_dependencies` (`program`:
    the imports and the statements it can evaluate itself); `qualified` maps each imported name to the dotted
    path it stands for (`np` -> `numpy`, `exp` -> `math.exp`)."""

    names: frozenset[str]
    qualified: Mapping[str, str]
    program: str


# ---------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------


@lru_cache(maxsize=1 << 15)
def _walk(node: ast.AST) -> tuple[ast.AST, ...]:
    """`ast.walk(node)`, remembered: a cell's statements are walked by many questions. Only trees that are not
    changed after their first walk are asked (the splitter changes a node only after every question about it)."""
    return tuple(ast.walk(node))


def _loaded_names(node: ast.AST) -> set[str]:
    return {child.id for child in _walk(node) if isinstance(child, ast.Name)}


def _mentions(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(child, ast.Name) and child.id in names for child in _walk(node))


def top_level_bindings(tree: ast.Module) -> set[str]:
    """Names a cell binds at top level (assignments, imports, definitions, loop variables)."""
    bound: set[str] = set()
    for statement in tree.body:
        for node in _walk(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                bound.add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                bound |= _import_names(node)
            elif isinstance(node, _DEFINITIONS):
                bound.add(node.name)
    return bound


def _import_names(node: ast.Import | ast.ImportFrom) -> set[str]:
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


def _import_paths(node: ast.Import | ast.ImportFrom) -> dict[str, str]:
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


def _within(path: str, prefixes: Iterable[str]) -> str | None:
    """The prefix (of whole dotted components) `path` falls under, if any."""
    for prefix in prefixes:
        if path == prefix or path.startswith(prefix + "."):
            return prefix
    return None


def _function_globals(function: ast.FunctionDef) -> set[str]:
    """Names a function reads that it neither receives nor assigns (a conservative over-approximation)."""
    arguments = function.args
    local = {arg.arg for arg in arguments.posonlyargs + arguments.args + arguments.kwonlyargs}
    local |= {arg.arg for arg in (arguments.vararg, arguments.kwarg) if arg is not None}
    for node in _walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            local.add(node.id)
        elif isinstance(node, ast.arg):
            local.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            local |= _import_names(node)
        elif isinstance(node, _DEFINITIONS) and node is not function:
            local.add(node.name)
    return {
        node.id for node in _walk(function) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
    } - local


def _root_name(node: ast.AST) -> str | None:
    """`x` of `x`, `x.a`, `x[0]`, `x.a[1].b`."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _dotted(node: ast.AST) -> tuple[str, list[str]] | None:
    """(`np`, [`random`, `rand`]) of `np.random.rand`; None for anything but a name and attributes."""
    attributes: list[str] = []
    while isinstance(node, ast.Attribute):
        attributes.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return node.id, attributes[::-1]


def _chains(node: ast.AST) -> list[tuple[ast.expr, bool]]:
    """Every maximal name/attribute chain under `node`, with whether it is the function of a call."""
    called: set[int] = set()
    inner: set[int] = set()
    found: list[ast.expr] = []
    for child in _walk(node):
        if isinstance(child, ast.Call):
            called.add(id(child.func))
        if isinstance(child, ast.Attribute):
            inner.add(id(child.value))
    for child in _walk(node):
        if isinstance(child, (ast.Name, ast.Attribute)) and id(child) not in inner:
            found.append(child)
    return [(chain, id(chain) in called) for chain in found]


# ---------------------------------------------------------------------------
# Scopes of one statement (exact, from the compiler's symbol table)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Symbols:
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


def _symbols(statement: ast.stmt) -> _Symbols:
    nodes = _module_level(statement)
    if len(nodes) == sum(1 for _ in _walk(statement)):  # no nested scope: the names are the syntax's
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
    return _Symbols(frozenset(reads | late | now), frozenset(binds), frozenset(late))


def _plain_symbols(statement: ast.stmt, nodes: list[ast.AST]) -> _Symbols:
    """`_symbols` of a statement without nested scopes, read off its syntax tree."""
    reads: set[str] = set()
    binds: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Name):
            (reads if isinstance(node.ctx, ast.Load) else binds).add(node.id)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            reads.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            binds |= _import_names(node)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            binds.add(node.name)
    if isinstance(statement, _LOOP_TARGETS):
        reads -= _loop_targets(statement)
    return _Symbols(frozenset(reads), frozenset(binds), frozenset())


_NESTED_SCOPES = (*_DEFINITIONS, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


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
    for node in _walk(statement):
        if isinstance(node, (ast.For, ast.AsyncFor)):
            targets.append(node.target)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            targets.append(node.optional_vars)
    names = {name.id for target in targets for name in _walk(target) if isinstance(name, ast.Name)}
    names |= {node.name for node in _walk(statement) if isinstance(node, ast.ExceptHandler) and node.name}
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
    forbidden = (ast.Return, ast.Yield, ast.YieldFrom, ast.Global, ast.Nonlocal, *_DEFINITIONS)
    nodes = list(_walk(statement))[1:]
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
        for node in _walk(statement)
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del))
    }
    prefix = f"{INLINED_PREFIX}{function.name}_"
    for statement in body:
        for node in _walk(statement):
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
        for node in _walk(statement)
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
# What the checker knows at each statement of a cell
# ---------------------------------------------------------------------------


@dataclass
class _Binding:
    status: Status
    late: frozenset[str] = frozenset()  # names a call of this value reads (functions and lambdas of the cell)
    states: frozenset[str] = frozenset()  # random states a use of this value draws from
    path: str | None = None  # the dotted path of an imported name
    defined: bool = False  # a function or lambda the cell defines (its code is the cell's, not the model's)
    signature: _Signature | None = None  # of a function or lambda the cell defines


@dataclass
class _Evaluated:
    """A statement the checker can evaluate itself (`position` in the cell)."""

    position: int
    names: frozenset[str]
    states: frozenset[str]


class _Flow:
    """Walks a cell's statements in order, keeping each name's status (trusted: the checker's own value;
    model: the test process's; tainted: derived from `target`), which random states the checker knows, and
    which names may share storage (one group per set of names met in one statement the checker evaluates)."""

    def __init__(self, scope: CheckerScope) -> None:
        self.scope = scope
        self.bindings: dict[str, _Binding] = {}
        self.known: set[str] = set()
        self.parent: dict[str, str] = {}
        self.evaluated: list[_Evaluated] = []
        self.fresh_states = 0
        self.random_in_test_process = False

    # -- names ---------------------------------------------------------------------------------
    def status(self, name: str) -> Status:
        binding = self.bindings.get(name)
        if binding is not None:
            return binding.status
        return "trusted" if name in self.scope.names else "model"

    def trusted(self, name: str, seen: frozenset[str] = frozenset()) -> bool:
        """The checker has this name's value now (for a function: and every name it reads when called)."""
        if self.status(name) != "trusted":
            return False
        binding = self.bindings.get(name)
        if binding is None or name in seen:
            return True
        return all(self.trusted(other, seen | {name}) for other in binding.late)

    def tainted(self) -> set[str]:
        return {name for name, binding in self.bindings.items() if binding.status == "tainted"} | {TARGET_NAME}

    def trusted_names(self) -> set[str]:
        cell = {name for name in self.bindings if self.trusted(name)}
        return cell | {name for name in self.scope.names if name not in self.bindings}

    def path(self, name: str) -> str | None:
        binding = self.bindings.get(name)
        if binding is not None:
            return binding.path
        return self.scope.qualified.get(name)

    def qualified(self, chain: ast.AST) -> str | None:
        dotted = _dotted(chain)
        if dotted is None:
            return None
        base = self.path(dotted[0])
        return ".".join([base, *dotted[1]]) if base is not None else None

    # -- storage groups ------------------------------------------------------------------------
    def _find(self, name: str) -> str:
        while self.parent.get(name, name) != name:
            name = self.parent[name]
        return name

    def _join(self, names: Iterable[str]) -> None:
        roots = [self._find(name) for name in names]
        for root in roots[1:]:
            self.parent[root] = roots[0]

    def group_of(self, names: Iterable[str]) -> set[str]:
        roots = {self._find(name) for name in names}
        members = set(self.parent) | set(self.bindings)
        return {name for name in members if self._find(name) in roots} | set(names)

    def cell_names(self, names: Iterable[str]) -> set[str]:
        return {name for name in names if name in self.bindings and self.bindings[name].path is None}

    # -- random states -------------------------------------------------------------------------
    def states_of_use(self, name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        binding = self.bindings.get(name)
        if binding is None or name in seen:
            return set()
        states = set(binding.states)
        for other in binding.late:
            states |= self.states_of_use(other, seen | {name})
        return states

    def random_state(self, path: str | None) -> str | None:
        if path is None or path in RANDOM_CONSTRUCTORS or path in RANDOM_SEEDERS:
            return None
        prefix = _within(path, RANDOM_STATES)
        return RANDOM_STATES[prefix] if prefix is not None else None

    def could_draw(self, name: str) -> bool:
        """Using `name` may draw random numbers (a module above or under `RANDOM_STATES`, or a generator)."""
        path = self.path(name)
        if path is not None:
            return _within(path, RANDOM_STATES) is not None or any(
                _within(prefix, [path]) is not None for prefix in RANDOM_STATES
            )
        return bool(self.states_of_use(name))

    def drawn_states(self, node: ast.AST, names: Iterable[str]) -> set[str]:
        """The random states evaluating `node` (which reads `names`) draws from."""
        names = set(names)
        if not any(self.could_draw(name) for name in names | _loaded_names(node)):
            return set()
        states: set[str] = set()
        for chain, _ in _chains(node):
            state = self.random_state(self.qualified(chain))
            if state is not None:
                states.add(state)
        for name in names:
            states |= self.states_of_use(name)
        for call in (n for n in _walk(node) if isinstance(n, ast.Call)):
            path = self.qualified(call.func)
            if path in RANDOM_SEEDERS and not _given_seed(call):
                states.add(UNKNOWABLE_STATE)  # seeded from entropy: nothing can be known after it
        return states

    def seeded_states(self, statement: ast.stmt) -> set[str]:
        """The global states a statement that is only a seeding call (`np.random.seed(0)`) makes known."""
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
            call = statement.value
            path = self.qualified(call.func)
            if path is not None and path in RANDOM_SEEDERS and _given_seed(call):
                return {RANDOM_SEEDERS[path]}
        return set()

    def bound_states(self, statement: ast.stmt) -> tuple[set[str], set[str]]:
        """(random states the names a statement binds draw from when used, the new ones it makes known)."""
        value = getattr(statement, "value", None)
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            value = statement
        if value is None:
            return set(), set()
        states: set[str] = set()
        fresh: set[str] = set()
        for node in _walk(value):
            if isinstance(node, ast.Call) and self.qualified(node.func) in RANDOM_CONSTRUCTORS:
                self.fresh_states += 1
                state = f"generator {self.fresh_states}"
                states.add(state)
                if _given_seed(node):
                    fresh.add(state)
        for chain, called in _chains(value):
            if called:
                continue
            drawn = self.random_state(self.qualified(chain))
            if drawn is not None:
                states.add(drawn)
            dotted = _dotted(chain)
            if dotted is not None and (not dotted[1] or dotted[1][-1] in RANDOM_SHARING_METHODS):
                states |= self.states_of_use(dotted[0])
        for call in (node for node in _walk(value) if isinstance(node, ast.Call)):
            dotted = _dotted(call.func)
            if dotted is not None and dotted[1] and dotted[1][-1] in RANDOM_SHARING_METHODS:
                states |= self.states_of_use(dotted[0])
        if _defines_code(statement):  # calling it draws what its code draws
            states |= self.drawn_states(value, _loaded_names(value))
        return states, fresh

    # -- classification --------------------------------------------------------------------------
    def test_process_only(self, node: ast.AST, names: Iterable[str]) -> bool:
        """`node` calls something whose result depends on the process, not on its arguments."""
        if any(name in TEST_PROCESS_ONLY_BUILTINS and name not in self.bindings for name in names):
            return True
        for chain, _ in _chains(node):
            path = self.qualified(chain)
            if path is not None and _within(path, TEST_PROCESS_ONLY) is not None:
                return True
        return False

    def evaluable(self, statement: ast.stmt, symbols: _Symbols) -> bool:
        """The checker can evaluate `statement` itself, with the same result as the test process."""
        if not all(self.trusted(name) for name in symbols.reads):
            return False
        if self.test_process_only(statement, symbols.reads):
            return False
        if isinstance(statement, _DEFINITIONS):
            return True  # what its code draws is drawn when it is called
        if self.drawn_states(statement, symbols.reads) - self.known:
            self.random_in_test_process = True
            return False
        return True

    # -- effects -------------------------------------------------------------------------------
    def bind(self, names: Iterable[str], binding: _Binding) -> None:
        """Bind `names` (storage groups are kept across rebinding: a conservative over-approximation)."""
        for name in names:
            self.bindings[name] = binding

    def evaluate(self, position: int, statement: ast.stmt, symbols: _Symbols) -> None:
        """Record a statement the checker can evaluate, and what it binds."""
        states, fresh = self.bound_states(statement)
        seeded = self.seeded_states(statement)
        drawn = self.drawn_states(statement, symbols.reads) | seeded  # a seed is needed by the draws after it
        self.known |= seeded | fresh
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            for name, path in _import_paths(statement).items():
                self.bind([name], _Binding("trusted", path=path))
            return
        defined = _defines_code(statement)
        signature = self.signature(statement) if defined else None
        for name in symbols.binds:
            self.bind([name], _Binding("trusted", symbols.late, frozenset(states), None, defined, signature))
        names = self.cell_names(symbols.reads | symbols.binds)
        self._join(names)
        self.evaluated.append(_Evaluated(position, frozenset(names | symbols.late), frozenset(drawn | states)))

    def run_model_side(self, statement: ast.AST, symbols: _Symbols | None) -> None:
        """A statement (or part of one) that runs in the test process only: what it binds is model-side, the
        checker's values it may change become model-side (with their groups), and every random state may
        have been used by model code."""
        if isinstance(statement, _DEFINITIONS):  # defining a function runs none of its code
            self.bind(
                symbols.binds if symbols else (),
                _Binding(
                    "model", symbols.late if symbols else frozenset(), defined=True, signature=self.signature(statement)
                ),
            )
            return
        changed = self.changed_by(statement)
        for name in self.group_of(self.cell_names(changed)):
            if self.status(name) == "trusted":
                self.bindings[name] = _Binding("model")
        if symbols is not None and isinstance(statement, ast.stmt):
            defined = _defines_code(statement)
            late = symbols.late if defined else frozenset()
            self.bind(symbols.binds, _Binding("model", late, frozenset(), None, defined, self.signature(statement)))
        self.known.clear()

    def changed_by(self, node: ast.AST) -> set[str]:
        """The checker's names whose values the cell's own code in `node` may change in place (code under
        test may change what it is given, but only the test process's copies)."""
        return {name for name in self.changes_in(node) if self.trusted(name)}

    def changes_in(self, node: ast.AST) -> set[str]:
        """Root names of the values the cell's own code in `node` may change in place: stores into items and
        attributes, augmented assignments, methods called on them (but `NON_MUTATING_METHODS`), the
        arguments of `IN_PLACE_CALLS` (and of any call given `out=`), and what the cell's functions change."""
        changed: set[str] = set()
        for child in _walk(node):
            if isinstance(child, (ast.Subscript, ast.Attribute, ast.Starred)) and isinstance(
                child.ctx, (ast.Store, ast.Del)
            ):
                changed.add(_root_name(child) or "")
            elif isinstance(child, ast.AugAssign):
                changed.add(_root_name(child.target) or "")
            elif isinstance(child, ast.Call):
                changed |= self._changed_by_call(child)
        changed.discard("")
        return changed

    def _changed_by_call(self, call: ast.Call) -> set[str]:
        function = call.func
        roots = [_root_name(argument) for argument in call.args]
        keywords = {keyword.arg: _root_name(keyword.value) for keyword in call.keywords}
        changed = {keywords.get("out") or ""}
        if isinstance(function, ast.Attribute) and function.attr not in NON_MUTATING_METHODS:
            receiver = _root_name(function.value)
            if receiver is not None and self.path(receiver) is None:
                changed.add(receiver)  # a method of the cell's value: it may store its arguments in it
        path = self.callee_path(function)
        if path in IN_PLACE_CALLS or (isinstance(function, ast.Attribute) and function.attr in IN_PLACE_METHODS):
            changed |= {root for root in roots if root}
        binding = self.bindings.get(function.id) if isinstance(function, ast.Name) else None
        if binding is not None and binding.defined:
            signature = binding.signature
            changed |= _changed_arguments(signature, call)
            changed |= set(signature.changes - signature.parameters) if signature else set(binding.late)
        return changed

    def callee_path(self, function: ast.expr) -> str | None:
        """The dotted path of what a call calls (`builtins.<name>` for a builtin)."""
        if isinstance(function, ast.Name) and function.id in BUILTIN_NAMES and function.id not in self.bindings:
            return f"builtins.{function.id}"
        return self.qualified(function)

    def signature(self, statement: ast.stmt) -> _Signature | None:
        """For a statement defining one function or lambda of the cell: its parameters and the names whose
        values its code may change in place (None for anything else: a class, several lambdas)."""
        function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | None = None
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = statement
        else:
            lambdas = [node for node in _walk(statement) if isinstance(node, ast.Lambda)]
            function = lambdas[0] if len(lambdas) == 1 else None
        if function is None:
            return None
        arguments = function.args
        body: list[ast.AST] = list(function.body) if isinstance(function.body, list) else [function.body]
        return _Signature(
            tuple(argument.arg for argument in arguments.posonlyargs + arguments.args),
            arguments.vararg.arg if arguments.vararg else None,
            frozenset(argument.arg for argument in arguments.args + arguments.kwonlyargs),
            arguments.kwarg.arg if arguments.kwarg else None,
            frozenset(set().union(*(self.changes_in(node) for node in body))),
        )


@dataclass(frozen=True)
class _Signature:
    """The parameters of one function or lambda of the cell, and the names whose values its code may change
    in place (parameters and globals)."""

    positional: tuple[str, ...]
    vararg: str | None
    keywords: frozenset[str]
    kwarg: str | None
    changes: frozenset[str] = frozenset()

    @property
    def parameters(self) -> frozenset[str]:
        extra = {name for name in (self.vararg, self.kwarg) if name}
        return frozenset(self.positional) | self.keywords | extra


def _changed_arguments(signature: _Signature | None, call: ast.Call) -> set[str]:
    """Root names of the arguments of `call` whose parameters the called function may change (all of them
    when the function is unknown, e.g. a class, or the call unpacks arguments)."""
    roots = {root for root in map(_root_name, [*call.args, *(k.value for k in call.keywords)]) if root}
    if signature is None or any(isinstance(argument, ast.Starred) for argument in call.args):
        return roots
    changed: set[str] = set()
    changes = signature.changes
    for position, argument in enumerate(call.args):
        parameter = signature.positional[position] if position < len(signature.positional) else signature.vararg
        if parameter is None or parameter in changes:
            changed.add(_root_name(argument) or "")
    for keyword in call.keywords:
        parameter = keyword.arg if keyword.arg in signature.keywords else signature.kwarg
        if keyword.arg is None or parameter is None or parameter in changes:
            changed.add(_root_name(keyword.value) or "")
    changed.discard("")
    return changed


def _defines_code(statement: ast.stmt) -> bool:
    """The statement binds a function or lambda of the cell (a class too)."""
    if isinstance(statement, _DEFINITIONS):
        return True
    value = getattr(statement, "value", None)
    return value is not None and any(isinstance(node, ast.Lambda) for node in _walk(value))


def _given_seed(call: ast.Call) -> bool:
    """A seeding call or generator given a seed (not None): deterministic."""
    values = [*call.args, *(keyword.value for keyword in call.keywords)]
    return bool(values) and not all(isinstance(value, ast.Constant) and value.value is None for value in values)


# ---------------------------------------------------------------------------
# Splitting the checked statements
# ---------------------------------------------------------------------------


class _Splitter:
    """Turns checked statements into captures (test process) and a residual (checker)."""

    def __init__(self, flow: _Flow, test_functions: dict[str, ast.FunctionDef]) -> None:
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
        return bool(self.flow.drawn_states(node, _loaded_names(node)))

    def _has_model_part(self, node: ast.AST) -> bool:
        return any(not self._checker_name(name) for name in _loaded_names(node)) or self._draws(node)

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
                return model_side and not _mentions(node, self.tainted)
            return self._is_model_value(node.func)
        return False

    # -- rewriting ---------------------------------------------------------------
    def _capture(self, node: ast.expr) -> ast.Name:
        if self._draws(node) and all(self._checker_name(name) for name in _loaded_names(node)):
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
        tainted_here = _mentions(node, self.tainted)
        if not tainted_here and (self._is_model_value(node) or isinstance(node, _SCOPED)):
            return self._capture(node)
        if isinstance(node, _SCOPED):
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
        foreign = _function_globals(function) - self.trusted - set(self.test_functions)
        if foreign or not self.flow.trusted(name):
            shown = sorted(foreign)[:5] or [name]
            raise RewriteError(
                f"the test function {name} compares target-derived values using {shown} (names the checker cannot have)"
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


def _stored_names(targets: list[ast.expr]) -> set[str]:
    names: set[str] = set()
    for target in targets:
        for node in _walk(target):
            if isinstance(node, (ast.Attribute, ast.Subscript)):
                raise RewriteError("a statement stores a value derived from `target` into an attribute or item")
            if isinstance(node, ast.Name):
                names.add(node.id)
    return names


def _is_checked(statement: ast.stmt, tainted: set[str]) -> bool:
    return isinstance(statement, ast.Assert) or _mentions(statement, tainted)


def _nested_assert(statement: ast.stmt) -> bool:
    if isinstance(statement, _DEFINITIONS):
        return False
    return any(isinstance(node, ast.Assert) for node in list(_walk(statement))[1:])


# ---------------------------------------------------------------------------
# The checker's deps, and one cell
# ---------------------------------------------------------------------------


def _classify(flow: _Flow, position: int, statement: ast.stmt) -> str:
    """Record an unchecked statement of a cell (or of the dependencies) in `flow`: "import", "evaluated" (the
    checker can evaluate it itself) or "model" (it runs in the test process only)."""
    symbols = _symbols(statement)
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
    flow = _Flow(empty)
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


def _needed(evaluated: list[_Evaluated], residuals: list[tuple[int, set[str], set[str]]], flow: _Flow) -> set[int]:
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
    flow = _Flow(scope)
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
            flow.bind([name], _Binding("tainted"))
        used = _loaded_names(residual) - set(splitter.temps)
        for function in splitter.checker_functions.values():
            used |= _function_globals(function) | {function.name}
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
        reads_target=_mentions(tree, {TARGET_NAME}),
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
        for node in _walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    found.setdefault(alias.name, None)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.setdefault(node.module, None)
                for alias in node.names:
                    if alias.name != "*":
                        found.setdefault(f"{node.module}.{alias.name}", None)
    return tuple(found)
