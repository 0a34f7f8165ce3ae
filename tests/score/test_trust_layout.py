"""The scoring package laid out by trust: what runs under `python_binary` (the test process, the checker and what
both use) is run by path, imports only the standard library, the numeric packages and its own modules, and
never the `stages` package."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from stages.score.parent import launcher, targets_io
from stages.score.shared import child_runtime

# The packages `required_dependencies` needs in `python_binary` (the compare helpers and the targets reader use
# them too); everything else a child-side module imports is the standard library or a child-side module.
NUMERIC_PACKAGES = frozenset({"numpy", "scipy", "sympy", "h5py"})
PROGRAMS = (*launcher.PROGRAMS.values(), launcher.ZYGOTE, targets_io.LOADER)


def _child_modules() -> dict[str, Path]:
    """Every module a child-side program can import by its plain name (`CHILD_FOLDERS` are on its sys.path)."""
    modules: dict[str, Path] = {}
    for folder in map(Path, child_runtime.CHILD_FOLDERS):
        for path in folder.glob("*.py"):
            modules.setdefault(path.stem, path)
        for package in folder.iterdir():
            if (package / "__init__.py").is_file():
                modules.setdefault(package.name, package / "__init__.py")
    return modules


def _imported_roots(path: Path) -> set[str]:
    """The top-level names of every absolute import in `path`, at any depth."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots - {"__future__"}


def _run_by_path_closure() -> dict[str, Path]:
    """The programs started by path and every child-side module they import, by plain name, at any depth."""
    known = _child_modules()
    reached = {path.stem: path for path in PROGRAMS}
    pending = list(reached.values())
    while pending:
        for root in _imported_roots(pending.pop()):
            if root in known and root not in reached:
                reached[root] = known[root]
                pending.append(known[root])
    for package in ("scicode",):  # its modules are imported by dotted name (`scicode.compare.cmp`)
        for path in sorted(known[package].parent.rglob("*.py")):
            reached.setdefault(path.relative_to(known[package].parent.parent).as_posix(), path)
    return reached


def test_the_programs_started_by_path_sit_in_their_trust_packages() -> None:
    score = child_runtime.SCORE_DIR
    assert launcher.PROGRAMS["test"].parent == Path(score) / "test_process"
    assert launcher.PROGRAMS["checker"].parent == Path(score) / "checker"
    assert launcher.ZYGOTE.parent == Path(score) / "shared"
    assert all(path.is_file() for path in PROGRAMS)


@pytest.mark.parametrize("name", sorted(_run_by_path_closure()))
def test_what_runs_under_python_binary_imports_no_stages_module(name: str) -> None:
    path = _run_by_path_closure()[name]
    allowed = set(sys.stdlib_module_names) | NUMERIC_PACKAGES | set(_child_modules())
    assert _imported_roots(path) - allowed == set(), (
        f"{path} imports outside the standard library and the numeric packages"
    )


def test_the_checker_process_never_imports_the_split_of_the_cells() -> None:
    """rewrite.py and the verdict rules run in the doit process: nothing run by path reaches them."""
    reached = _run_by_path_closure()
    assert {"rewrite", "cell_flow", "cell_syntax", "verdict_rules"} & set(reached) == set()


@pytest.mark.parametrize("role", sorted(launcher.PROGRAMS))
def test_a_program_starts_by_path_outside_the_project(role: str, tmp_path: Path) -> None:
    """Run from elsewhere, without the environment's PYTHONPATH: it finds its shared modules by its own path."""
    result = subprocess.run(
        [sys.executable, "-E", "-s", str(launcher.PROGRAMS[role]), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "--channel-fd" in result.stdout


# Where a verdict is made: every `StepVerdict(...)` of the package is in the rules module; elsewhere a verdict is only
# read back (the record's own readers build theirs with `cls(...)`) or assembled (`dataclasses.replace` of a
# verdict the rules made, never of its status).
VERDICT_RULES = Path(launcher.__file__).resolve().parents[1] / "checker" / "verdict_rules.py"
STAGES_DIR = VERDICT_RULES.parents[2]


def _verdicts_built(path: Path, root: Path = STAGES_DIR.parent) -> list[str]:
    """`file:line` (relative to `root`) of each construction of a StepVerdict in `path`, and of each `replace(...)`
    that sets a status."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        sets_status = called == "replace" and any(keyword.arg == "status" for keyword in node.keywords)
        if called == "StepVerdict" or sets_status:
            found.append(f"{path.relative_to(root).as_posix()}:{node.lineno}")
    return found


def verdicts_built_outside_the_rules() -> list[str]:
    return [
        place
        for path in sorted(STAGES_DIR.rglob("*.py"))
        if path.resolve() != VERDICT_RULES
        for place in _verdicts_built(path)
    ]


def test_the_count_of_verdicts_built_sees_a_construction_and_a_changed_status(tmp_path: Path) -> None:
    source = tmp_path / "stages" / "elsewhere.py"
    source.parent.mkdir()
    source.write_text(
        "import dataclasses\nfrom stages.records import verdict\n"
        "a = verdict.StepVerdict('1.1', 'fail', 'x')\n"
        "b = dataclasses.replace(a, status='pass')\n"
        "c = dataclasses.replace(a, reason='noted')\n",
        encoding="utf-8",
    )
    assert _verdicts_built(source, tmp_path) == ["stages/elsewhere.py:3", "stages/elsewhere.py:4"]


def test_every_verdict_is_built_by_the_verdict_rules() -> None:
    assert verdicts_built_outside_the_rules() == []
    assert VERDICT_RULES.is_file() and _verdicts_built(VERDICT_RULES)
