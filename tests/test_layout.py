"""The suite's layout: tests/ mirrors stages/. Each test folder is named after the package under stages/ whose code
its tests test (tests/execution/confinement/ for stages/execution/confinement/), tests/pipeline/ holds the whole
pipeline's doit runs, and only the few test files that span the whole project stay at the top.

So a test dropped in the wrong place, or a package renamed without its tests, fails here."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
STAGES = TESTS.parent / "stages"
# Folders of helpers and data, not of tests: shared helper modules, the golden artifact files and their generator,
# the replay fixtures.
HELPER_FOLDERS = frozenset({"support", "golden", "fixtures"})
# Test files of the project as a whole, not of one package: the documentation, the import graph of stages/, the
# benchmark scripts, the trusted side's totality across packages, and the suite itself.
TOP_LEVEL_TESTS = frozenset(
    {
        "test_bench_scripts.py",
        "test_docs.py",
        "test_import_graph.py",
        "test_layout.py",
        "test_suite_groups.py",
        "test_trusted_totality.py",
    }
)


def mirrored_folders(root: Path) -> list[Path]:
    """Every folder under `root` but the helper folders (and what they hold) and caches, relative to `root`."""
    found = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if not path.is_dir() or relative.parts[0] in HELPER_FOLDERS or "__pycache__" in relative.parts:
            continue
        found.append(relative)
    return found


def layout_problems(tests: Path, stages: Path) -> list[str]:
    """What is out of place in `tests` against the packages of `stages`, one line each (none: it mirrors)."""
    problems = []
    for folder in mirrored_folders(tests):
        if not (stages / folder / "__init__.py").is_file():
            problems.append(f"tests/{folder.as_posix()}/ has no package stages/{folder.as_posix()}/")
    # every folder holding a module, and each folder above it, is a package: a module's name follows its path
    # (tests.score.score_helpers), so two test files may share a name in different folders
    packages = {module.parent for module in tests.rglob("*.py") if "__pycache__" not in module.parts}
    packages |= {parent for package in packages for parent in package.parents if parent.is_relative_to(tests)}
    for folder in sorted(packages):
        if not (folder / "__init__.py").is_file():
            problems.append(f"tests/{folder.relative_to(tests).as_posix()}/ has no __init__.py".replace("/./", "/"))
    top = {path.name for path in tests.glob("test_*.py")}
    problems += [
        f"tests/{name} belongs in the folder of the package it tests" for name in sorted(top - TOP_LEVEL_TESTS)
    ]
    problems += [
        f"tests/{name} is named as a top-level test but does not exist" for name in sorted(TOP_LEVEL_TESTS - top)
    ]
    for helper in sorted(HELPER_FOLDERS):
        if not (tests / helper).is_dir():
            problems.append(f"tests/{helper}/ is named as a helper folder but does not exist")
        problems += [
            f"tests/{path.relative_to(tests)} is a test in a helper folder"
            for path in (tests / helper).rglob("test_*.py")
        ]
    return problems


def test_the_tests_mirror_the_packages() -> None:
    assert layout_problems(TESTS, STAGES) == []
    assert len(mirrored_folders(TESTS)) >= 15  # the stage packages and those below them, not an empty walk


def test_a_test_out_of_place_is_named(tmp_path: Path) -> None:
    tests, stages = tmp_path / "tests", tmp_path / "stages"
    for package in ("compare", "execution", "execution/confinement"):
        (stages / package).mkdir(parents=True)
        (stages / package / "__init__.py").touch()
    for folder in ("", "compare", "execution", "execution/confinement", "comparison", *HELPER_FOLDERS):
        (tests / folder).mkdir(parents=True, exist_ok=True)
        if folder != "execution":
            (tests / folder / "__init__.py").touch()
    for name in TOP_LEVEL_TESTS | {"test_select.py"}:
        (tests / name).touch()
    (tests / "support" / "test_helpers.py").touch()
    assert layout_problems(tests, stages) == [
        "tests/comparison/ has no package stages/comparison/",
        "tests/execution/ has no __init__.py",
        "tests/test_select.py belongs in the folder of the package it tests",
        "tests/support/test_helpers.py is a test in a helper folder",
    ]
