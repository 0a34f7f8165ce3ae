"""The import graph of `stages`: no cycles, and no stage reaches into another stage for a file name.

The graph is built from the source (AST), not by importing: every `import` / `from ... import` statement
of a `stages.*` module, at module level, inside a function or under `if TYPE_CHECKING:`, is an edge. A type-only
import is never executed, but it is a dependency of the design all the same (mypy follows it): a circle through
one is a circle, and one that climbs a layer climbs it. `from stages.a import b` points at the module `stages.a.b`
when that is a module, else at `stages.a`. A package's public face that imports its names on first use declares
them in a module-level `EXPORTED_FROM = {"name": "stages.a.b", ...}`: each module named there is an edge of
the face.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "stages"

# The entry module of each stage (its action and up-to-date check). Only the wiring (the task kind of each stage
# package, its `task` module; the glue of stages.pipeline.wiring; the preflight) calls them; a stage that needs
# another stage's file name asks `stages.storage.paths` (RunPaths), never that stage.
STAGE_ENTRIES = ("stages.select.stage", "stages.generate.stage", "stages.score.parent.stage", "stages.summarize.stage")
TASK_KIND_MODULES = frozenset(
    f"stages.{stage}.task"
    for stage in (
        "download",
        "select",
        "targets",
        "preflight",
        "generate",
        "score",
        "summarize",
        "runs",
        "export",
        "compare",
    )
)
WIRING = TASK_KIND_MODULES | {"stages.pipeline.wiring", "stages.preflight.checks"}
# The name of the table by which a package's public face (its __init__) imports its names on first use.
LAZY_FACE_TABLE = "EXPORTED_FROM"


def module_name(path: Path) -> str:
    parts = path.relative_to(PROJECT_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_modules(root: Path = PROJECT_ROOT / PACKAGE) -> dict[str, Path]:
    return {module_name(path): path for path in sorted(root.rglob("*.py"))}


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _assigned(node: ast.stmt) -> tuple[ast.expr | None, ast.expr | None]:
    """The target and value of a module-level assignment of one name (None, None for any other statement)."""
    if isinstance(node, ast.AnnAssign):
        return node.target, node.value
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        return node.targets[0], node.value
    return None, None


def lazy_face(tree: ast.Module) -> dict[str, str]:
    """The names a module's `EXPORTED_FROM` table imports on first use, each with its module (none: no table)."""
    for node in tree.body:
        target, value = _assigned(node)
        if isinstance(target, ast.Name) and target.id == LAZY_FACE_TABLE and isinstance(value, ast.Dict):
            return {
                key.value: item.value
                for key, item in zip(value.keys, value.values)
                if isinstance(key, ast.Constant)
                and isinstance(key.value, str)
                and isinstance(item, ast.Constant)
                and isinstance(item.value, str)
            }
    return {}


def imported_modules(module: str, path: Path, known: set[str]) -> set[str]:
    """The `stages.*` modules that `module` imports (at any depth of its code, type-only imports included, and
    through its lazy public face)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    targets: set[str] = set(lazy_face(tree).values())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, path.name == "__init__.py", node)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                targets.add(submodule if submodule in known else base)
    return {target for target in targets if target in known and target != module}


def imported_names(module: str, path: Path) -> set[tuple[str, str]]:
    """Each (module, name) that `module` takes by `from module import name` (type-only imports included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return {
        (_absolute(module, path.name == "__init__.py", node), alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def import_graph() -> dict[str, set[str]]:
    modules = source_modules()
    known = set(modules)
    return {module: imported_modules(module, path, known) for module, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as [a, b, ..., a], or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path = [start]
        iterators = [iter(sorted(graph[start]))]
        state[start] = 1
        while iterators:
            following = next(iterators[-1], None)
            if following is None:
                state[path.pop()] = 2
                iterators.pop()
            elif state.get(following) == 1:
                return path[path.index(following) :] + [following]
            elif not state.get(following):
                state[following] = 1
                path.append(following)
                iterators.append(iter(sorted(graph.get(following, ()))))
    return None


def test_the_graph_is_read_from_the_source() -> None:
    graph = import_graph()
    assert "stages.storage.paths" in graph["stages.config.settings"]
    assert "stages.select.stage" in graph["stages.pipeline.wiring"]  # an import inside a function is an edge
    assert "stages.config.settings" in graph["stages.config.task_kind"]  # and one under `if TYPE_CHECKING:`
    assert "stages.score.parent.stage" in graph["stages.score"]  # so is a module of a lazy public face's table


def test_find_cycle_names_the_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


def test_stages_has_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle in stages: " + " -> ".join(cycle or ())


def test_score_does_not_import_generate() -> None:
    reaching = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        if module.startswith("stages.score")
        for target in targets
        if target.startswith("stages.generate")
    )
    assert reaching == [], "; ".join(reaching)


def stage_package(entry: str) -> str:
    return ".".join(entry.split(".")[:2])


@pytest.mark.parametrize("entry", STAGE_ENTRIES)
def test_a_stage_entry_is_imported_by_the_wiring_only(entry: str) -> None:
    """No stage (nor the results reader) asks another stage for a file name or anything else. A stage package's
    public face may name what its entry offers the wiring; those names too are taken by the wiring only."""
    graph = import_graph()
    assert entry in graph, f"{entry} is not a module of {PACKAGE}"
    face = stage_package(entry)
    importers = sorted(
        module
        for module, targets in graph.items()
        if entry in targets and module not in WIRING and not module.startswith(entry + ".") and module != face
    )
    assert importers == [], f"{entry} is imported by {', '.join(importers)}"
    modules = source_modules()
    entry_names = {
        name for name, module in lazy_face(ast.parse(modules[face].read_text("utf-8"))).items() if module == entry
    }
    takers = sorted(
        f"{module} takes {name}"
        for module, path in modules.items()
        if module not in WIRING and not module.startswith(face + ".")
        for source, name in imported_names(module, path)
        if source == face and name in entry_names
    )
    assert takers == [], f"{face}'s names from {entry} are taken outside the wiring: {'; '.join(takers)}"


def test_the_public_face_of_score_names_what_it_offers_the_wiring() -> None:
    offered = lazy_face(ast.parse((PROJECT_ROOT / PACKAGE / "score" / "__init__.py").read_text("utf-8")))
    assert {name for name, module in offered.items() if module == "stages.score.parent.stage"} == {
        "expected_work",
        "score_fingerprint",
    }


# compare, runs and export read a run's numbers from `stages.numbers` and write their pages with `stages.pages`; the
# summarize stage is a stage, not their library.
RESULTS_COMMANDS = frozenset({"compare", "runs", "export"})


def test_the_results_commands_import_nothing_from_the_summarize_stage() -> None:
    reaching = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        if top_package(module) in RESULTS_COMMANDS
        for target in targets
        if top_package(target) == "summarize"
    )
    assert reaching == [], "; ".join(reaching)


# The packages whose inside nobody else imports: only the public face (the package itself) and the modules named
# here (the task kind, which the task registry lists like every stage's).
FACED_PACKAGES = {"stages.score": frozenset({"stages.score.task"})}


@pytest.mark.parametrize("package", sorted(FACED_PACKAGES))
def test_nothing_outside_a_faced_package_imports_its_inside(package: str) -> None:
    reaching = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        if module != package and not module.startswith(package + ".")
        for target in targets
        if target.startswith(package + ".") and target not in FACED_PACKAGES[package]
    )
    assert reaching == [], "; ".join(reaching)


# What runs by path under `python_binary` (the test process, what both child processes use, the checker
# program): it imports no `stages` module, and the doit process never imports the test process's program.
CHILD_SIDE_PREFIXES = ("stages.score.test_process", "stages.score.shared")
CHILD_SIDE_MODULES = frozenset({"stages.score.checker.checker", "stages.score.checker.value_description"})


def _child_side(module: str) -> bool:
    return module.startswith(CHILD_SIDE_PREFIXES) or module in CHILD_SIDE_MODULES


def test_the_child_side_imports_no_stages_module() -> None:
    graph = import_graph()
    assert any(_child_side(module) for module in graph)
    reaching = sorted(
        f"{module} imports {target}" for module, targets in graph.items() if _child_side(module) for target in targets
    )
    assert reaching == [], "; ".join(reaching)


def test_nothing_imports_the_test_process() -> None:
    importers = sorted(
        module
        for module, targets in import_graph().items()
        if any(target.startswith("stages.score.test_process") for target in targets)
    )
    assert importers == [], ", ".join(importers)


# The layers of `stages`, from the top down: a module imports only from its own package, a layer below its own,
# or (among the stage packages, which form one layer) another stage package without a cycle between packages.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("pipeline",),  # the doit side: task registry, wiring, doit's variables
    ("download", "select", "targets", "preflight", "generate", "score", "summarize", "compare", "runs", "export"),
    ("pages",),  # the HTML page writer and every page's template
    ("numbers",),  # the numbers of a run: rows, metrics, pass@k, pricing, provenance, intervals
    ("progress",),  # what a run shows while it runs
    ("records",),
    ("config",),
    ("benchmark",),
    ("storage",),
    ("execution",),
    ("errors", "exit_codes", "statuses"),  # the loose modules
)
LAYER_OF = {package: rank for rank, packages in enumerate(LAYERS) for package in packages}
STAGE_LAYER = 1


def top_package(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def test_every_top_level_name_of_stages_has_a_layer() -> None:
    names = {top_package(module) for module in source_modules() if module != PACKAGE}
    assert names == set(LAYER_OF), f"not in a layer: {sorted(names - set(LAYER_OF))}"


def test_no_import_runs_back_up_a_layer() -> None:
    upward = [
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        for target in targets
        if top_package(module) and LAYER_OF[top_package(target)] < LAYER_OF[top_package(module)]
    ]
    assert not upward, "imports that run back up a layer:\n" + "\n".join(sorted(upward))


def test_the_stage_packages_import_each_other_without_a_cycle() -> None:
    between: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        for target in targets:
            source, destination = top_package(module), top_package(target)
            if source != destination and LAYER_OF.get(source) == LAYER_OF.get(destination) == STAGE_LAYER:
                between.setdefault(source, set()).add(destination)
    graph = {package: between.get(package, set()) for package in LAYERS[STAGE_LAYER]}
    assert find_cycle(graph) is None, find_cycle(graph)


def test_each_stage_package_declares_its_task_kind_and_the_registry_lists_them() -> None:
    graph = import_graph()
    assert TASK_KIND_MODULES <= set(graph), sorted(TASK_KIND_MODULES - set(graph))
    assert TASK_KIND_MODULES <= graph["stages.pipeline.tasks"]


def test_only_the_doit_adapter_reads_doit_internals() -> None:
    readers = sorted(
        module
        for module, path in source_modules().items()
        if "_CMDLINE_VARS" in path.read_text(encoding="utf-8") and module != "stages.pipeline.doit_adapter"
    )
    assert readers == [], ", ".join(readers)
