"""What the checker knows at each statement of a test cell: each name's status (the checker's own value, the
test process's, or derived from `target`), which random states it knows, which names may share storage, and what
a statement may change in place (`CellFlow`).

Trusted, in the doit process: part of the split of each test cell (`rewrite.py`).
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from stages.score.checker.cell_syntax import (
    DEFINITIONS,
    StatementSymbols,
    dotted_name,
    import_paths,
    loaded_names,
    name_chains,
    root_name,
    walked_nodes,
    within,
)

TARGET_NAME = "target"

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


@dataclass(frozen=True)
class CheckerScope:
    """What the checker binds before any cell: builtins, and what it runs of `required_dependencies` (`program`:
    the imports and the statements it can evaluate itself); `qualified` maps each imported name to the dotted
    path it stands for (`np` -> `numpy`, `exp` -> `math.exp`)."""

    names: frozenset[str]
    qualified: Mapping[str, str]
    program: str


# ---------------------------------------------------------------------------
# What the checker knows at each statement of a cell
# ---------------------------------------------------------------------------


@dataclass
class Binding:
    status: Status
    late: frozenset[str] = frozenset()  # names a call of this value reads (functions and lambdas of the cell)
    states: frozenset[str] = frozenset()  # random states a use of this value draws from
    path: str | None = None  # the dotted path of an imported name
    defined: bool = False  # a function or lambda the cell defines (its code is the cell's, not the model's)
    signature: _Signature | None = None  # of a function or lambda the cell defines


@dataclass
class Evaluated:
    """A statement the checker can evaluate itself (`position` in the cell)."""

    position: int
    names: frozenset[str]
    states: frozenset[str]


class CellFlow:
    """Walks a cell's statements in order, keeping each name's status (trusted: the checker's own value;
    model: the test process's; tainted: derived from `target`), which random states the checker knows, and
    which names may share storage (one group per set of names met in one statement the checker evaluates)."""

    def __init__(self, scope: CheckerScope) -> None:
        self.scope = scope
        self.bindings: dict[str, Binding] = {}
        self.known: set[str] = set()
        self.parent: dict[str, str] = {}
        self.evaluated: list[Evaluated] = []
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
        dotted = dotted_name(chain)
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
        prefix = within(path, RANDOM_STATES)
        return RANDOM_STATES[prefix] if prefix is not None else None

    def could_draw(self, name: str) -> bool:
        """Using `name` may draw random numbers (a module above or under `RANDOM_STATES`, or a generator)."""
        path = self.path(name)
        if path is not None:
            return within(path, RANDOM_STATES) is not None or any(
                within(prefix, [path]) is not None for prefix in RANDOM_STATES
            )
        return bool(self.states_of_use(name))

    def drawn_states(self, node: ast.AST, names: Iterable[str]) -> set[str]:
        """The random states evaluating `node` (which reads `names`) draws from."""
        names = set(names)
        if not any(self.could_draw(name) for name in names | loaded_names(node)):
            return set()
        states: set[str] = set()
        for chain, _ in name_chains(node):
            state = self.random_state(self.qualified(chain))
            if state is not None:
                states.add(state)
        for name in names:
            states |= self.states_of_use(name)
        for call in (n for n in walked_nodes(node) if isinstance(n, ast.Call)):
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
        for node in walked_nodes(value):
            if isinstance(node, ast.Call) and self.qualified(node.func) in RANDOM_CONSTRUCTORS:
                self.fresh_states += 1
                state = f"generator {self.fresh_states}"
                states.add(state)
                if _given_seed(node):
                    fresh.add(state)
        for chain, called in name_chains(value):
            if called:
                continue
            drawn = self.random_state(self.qualified(chain))
            if drawn is not None:
                states.add(drawn)
            dotted = dotted_name(chain)
            if dotted is not None and (not dotted[1] or dotted[1][-1] in RANDOM_SHARING_METHODS):
                states |= self.states_of_use(dotted[0])
        for call in (node for node in walked_nodes(value) if isinstance(node, ast.Call)):
            dotted = dotted_name(call.func)
            if dotted is not None and dotted[1] and dotted[1][-1] in RANDOM_SHARING_METHODS:
                states |= self.states_of_use(dotted[0])
        if _defines_code(statement):  # calling it draws what its code draws
            states |= self.drawn_states(value, loaded_names(value))
        return states, fresh

    # -- classification --------------------------------------------------------------------------
    def test_process_only(self, node: ast.AST, names: Iterable[str]) -> bool:
        """`node` calls something whose result depends on the process, not on its arguments."""
        if any(name in TEST_PROCESS_ONLY_BUILTINS and name not in self.bindings for name in names):
            return True
        for chain, _ in name_chains(node):
            path = self.qualified(chain)
            if path is not None and within(path, TEST_PROCESS_ONLY) is not None:
                return True
        return False

    def evaluable(self, statement: ast.stmt, symbols: StatementSymbols) -> bool:
        """The checker can evaluate `statement` itself, with the same result as the test process."""
        if not all(self.trusted(name) for name in symbols.reads):
            return False
        if self.test_process_only(statement, symbols.reads):
            return False
        if isinstance(statement, DEFINITIONS):
            return True  # what its code draws is drawn when it is called
        if self.drawn_states(statement, symbols.reads) - self.known:
            self.random_in_test_process = True
            return False
        return True

    # -- effects -------------------------------------------------------------------------------
    def bind(self, names: Iterable[str], binding: Binding) -> None:
        """Bind `names` (storage groups are kept across rebinding: a conservative over-approximation)."""
        for name in names:
            self.bindings[name] = binding

    def evaluate(self, position: int, statement: ast.stmt, symbols: StatementSymbols) -> None:
        """Record a statement the checker can evaluate, and what it binds."""
        states, fresh = self.bound_states(statement)
        seeded = self.seeded_states(statement)
        drawn = self.drawn_states(statement, symbols.reads) | seeded  # a seed is needed by the draws after it
        self.known |= seeded | fresh
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            for name, path in import_paths(statement).items():
                self.bind([name], Binding("trusted", path=path))
            return
        defined = _defines_code(statement)
        signature = self.signature(statement) if defined else None
        for name in symbols.binds:
            self.bind([name], Binding("trusted", symbols.late, frozenset(states), None, defined, signature))
        names = self.cell_names(symbols.reads | symbols.binds)
        self._join(names)
        self.evaluated.append(Evaluated(position, frozenset(names | symbols.late), frozenset(drawn | states)))

    def run_model_side(self, statement: ast.AST, symbols: StatementSymbols | None) -> None:
        """A statement (or part of one) that runs in the test process only: what it binds is model-side, the
        checker's values it may change become model-side (with their groups), and every random state may
        have been used by model code."""
        if isinstance(statement, DEFINITIONS):  # defining a function runs none of its code
            self.bind(
                symbols.binds if symbols else (),
                Binding(
                    "model", symbols.late if symbols else frozenset(), defined=True, signature=self.signature(statement)
                ),
            )
            return
        changed = self.changed_by(statement)
        for name in self.group_of(self.cell_names(changed)):
            if self.status(name) == "trusted":
                self.bindings[name] = Binding("model")
        if symbols is not None and isinstance(statement, ast.stmt):
            defined = _defines_code(statement)
            late = symbols.late if defined else frozenset()
            self.bind(symbols.binds, Binding("model", late, frozenset(), None, defined, self.signature(statement)))
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
        for child in walked_nodes(node):
            if isinstance(child, (ast.Subscript, ast.Attribute, ast.Starred)) and isinstance(
                child.ctx, (ast.Store, ast.Del)
            ):
                changed.add(root_name(child) or "")
            elif isinstance(child, ast.AugAssign):
                changed.add(root_name(child.target) or "")
            elif isinstance(child, ast.Call):
                changed |= self._changed_by_call(child)
        changed.discard("")
        return changed

    def _changed_by_call(self, call: ast.Call) -> set[str]:
        function = call.func
        roots = [root_name(argument) for argument in call.args]
        keywords = {keyword.arg: root_name(keyword.value) for keyword in call.keywords}
        changed = {keywords.get("out") or ""}
        if isinstance(function, ast.Attribute) and function.attr not in NON_MUTATING_METHODS:
            receiver = root_name(function.value)
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
            lambdas = [node for node in walked_nodes(statement) if isinstance(node, ast.Lambda)]
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
    roots = {root for root in map(root_name, [*call.args, *(k.value for k in call.keywords)]) if root}
    if signature is None or any(isinstance(argument, ast.Starred) for argument in call.args):
        return roots
    changed: set[str] = set()
    changes = signature.changes
    for position, argument in enumerate(call.args):
        parameter = signature.positional[position] if position < len(signature.positional) else signature.vararg
        if parameter is None or parameter in changes:
            changed.add(root_name(argument) or "")
    for keyword in call.keywords:
        parameter = keyword.arg if keyword.arg in signature.keywords else signature.kwarg
        if keyword.arg is None or parameter is None or parameter in changes:
            changed.add(root_name(keyword.value) or "")
    changed.discard("")
    return changed


def _defines_code(statement: ast.stmt) -> bool:
    """The statement binds a function or lambda of the cell (a class too)."""
    if isinstance(statement, DEFINITIONS):
        return True
    value = getattr(statement, "value", None)
    return value is not None and any(isinstance(node, ast.Lambda) for node in walked_nodes(value))


def _given_seed(call: ast.Call) -> bool:
    """A seeding call or generator given a seed (not None): deterministic."""
    values = [*call.args, *(keyword.value for keyword in call.keywords)]
    return bool(values) and not all(isinstance(value, ast.Constant) and value.value is None for value in values)
