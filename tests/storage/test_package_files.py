"""Everything the package reads at run time lies inside `stages/`, so an installed wheel runs as the checkout does
(`tests/pipeline/test_installed_wheel.py` installs one): no module climbs from its own file above the package, and
the schemas are read inside it (`stages/schemas`, a link to the top-level `schemas/`)."""

from __future__ import annotations

import ast
from pathlib import Path

from stages.storage.paths import IMPORT_ROOT, PACKAGE_DIR, SCHEMAS_DIR

CHECKOUT = Path(__file__).resolve().parents[2]
ANCHORING_CALLS = frozenset({"Path", "abspath", "realpath", "resolve"})  # the same file, named another way


def _call_name(node: ast.Call) -> str:
    return node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")


def levels_up(node: ast.AST) -> int | None:
    """How many folders above its own file the path `node` names (0: the file itself), when it is built from
    `__file__` (`Path(__file__).resolve().parents[1]`, `os.path.dirname(__file__)`, ...); else None."""
    if isinstance(node, ast.Name):
        return 0 if node.id == "__file__" else None
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        inner = levels_up(node.value)
        return None if inner is None else inner + 1
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents":
        inner = levels_up(node.value.value)
        index = node.slice.value if isinstance(node.slice, ast.Constant) else None
        return None if inner is None or not isinstance(index, int) else inner + index + 1
    if isinstance(node, ast.Call):
        name = _call_name(node)
        subject = node.func.value if isinstance(node.func, ast.Attribute) and name in ("resolve", "with_name") else None
        if name == "dirname" and node.args:
            inner = levels_up(node.args[0])
            return None if inner is None else inner + 1
        if name == "with_name" and subject is not None:
            inner = levels_up(subject)
            return None if inner is None else inner + 1
        if name in ANCHORING_CALLS:
            anchored = subject if subject is not None else (node.args[0] if node.args else None)
            return None if anchored is None else levels_up(anchored)
    return None


def climbs_out(path: Path) -> list[str]:
    """The places of `path` that name a folder above the package, from its own file."""
    depth = len(path.relative_to(IMPORT_ROOT).parts) - 1  # levels up to stages/ itself
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{path.relative_to(IMPORT_ROOT)}:{node.lineno} climbs {levels} levels from its file"
        for node in ast.walk(tree)
        if isinstance(node, ast.expr) and (levels := levels_up(node)) is not None and levels > depth
    ]


def test_levels_up_reads_the_ways_a_path_is_built_from_the_file() -> None:
    def levels(code: str) -> int | None:
        return levels_up(ast.parse(code, mode="eval").body)

    assert levels("Path(__file__).resolve().parents[2]") == 3
    assert levels("Path(__file__).with_name('x.json')") == 1
    assert levels("Path(__file__).resolve().parent.parent") == 2
    assert levels("os.path.dirname(os.path.dirname(os.path.abspath(__file__)))") == 2
    assert levels("Path(other).parents[2]") is None


def test_no_module_of_the_package_reads_a_path_above_it() -> None:
    modules = sorted(PACKAGE_DIR.rglob("*.py"))
    assert len(modules) > 100
    assert [line for path in modules for line in climbs_out(path)] == []


def test_the_schemas_are_read_inside_the_package_and_are_the_checkouts() -> None:
    assert SCHEMAS_DIR.parent == PACKAGE_DIR and SCHEMAS_DIR.is_symlink()
    assert SCHEMAS_DIR.resolve() == (CHECKOUT / "schemas").resolve()
    assert len(list(SCHEMAS_DIR.glob("*.schema.json"))) >= 10
