"""The README is a front page and the documentation pages link up: every relative link names a file that exists
and, with an anchor, a heading of that file."""

from __future__ import annotations

import re
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
README = PROJECT_ROOT / "README.md"
FRONT_PAGE_BYTES = 15_500  # "a front page of at most about 15 KB"
# Pages the README links that another change adds (the glossary of statuses); checked once they exist.
PENDING_PAGES = frozenset({"docs/statuses.md"})
LINK = re.compile(r"\]\(([^)\s]+)\)")


def pages() -> list[Path]:
    return [README, *sorted((PROJECT_ROOT / "docs").glob("*.md"))]


def anchor_of(heading: str) -> str:
    """The anchor a Markdown renderer gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return {anchor_of(line.lstrip("#")) for line in lines if re.match(r"^#{1,6} ", line)}


def relative_links(path: Path) -> list[str]:
    found = LINK.findall(path.read_text(encoding="utf-8"))
    return [link for link in found if not re.match(r"^[a-z]+:", link)]


def test_the_readme_fits_a_front_page() -> None:
    assert README.stat().st_size <= FRONT_PAGE_BYTES


def test_every_relative_link_resolves_to_a_file_and_heading() -> None:
    checked = 0
    for page in pages():
        for link in relative_links(page):
            target, _, anchor = link.partition("#")
            path = (page.parent / target).resolve() if target else page
            name = str(path.relative_to(PROJECT_ROOT)) if path.is_relative_to(PROJECT_ROOT) else str(path)
            if name in PENDING_PAGES and not path.exists():
                continue
            assert path.is_file(), f"{page.name} links {link}: no such file"
            assert not anchor or anchor in anchors(path), f"{page.name} links {link}: no such heading"
            checked += 1
    assert checked >= 20


def test_the_readme_links_every_documentation_page() -> None:
    linked = {link.partition("#")[0] for link in relative_links(README)}
    on_disk = {f"docs/{path.name}" for path in (PROJECT_ROOT / "docs").glob("*.md")}
    assert on_disk | PENDING_PAGES <= linked


# What the package's sources and the documentation name of the package: a file (`stages/storage/paths.py`) or a
# module and a name in it (`stages.storage.paths.RunPaths`). A module moved or renamed leaves no stale name behind.
PACKAGE_PATH = re.compile(r"\bstages/[A-Za-z0-9_./]*[A-Za-z0-9_]")
DOTTED_NAME = re.compile(r"\bstages(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
# Stale names kept on purpose, by the file that holds them: changing them would move bytes of artifacts.
KEPT_NAMES: dict[tuple[str, str], str] = {
    ("stages/summarize/stage.py", "stages/uncertainty"): "a summary fingerprint part's name: renaming it rewrites "
    "every summary",
    ("stages/score/shared/child_runtime.py", "stages/confinement/confine.py"): "a verdict source: editing it "
    "invalidates every cached verdict",
    ("stages/score/test_process/runner.py", "stages/confinement/confine.py"): "a verdict source, likewise",
}


def naming_files() -> list[Path]:
    return [*pages(), PROJECT_ROOT / "dodo.py", *sorted((PROJECT_ROOT / "stages").rglob("*.py"))]


def path_exists(name: str) -> bool:
    """A file or folder, or a module named without its `.py`."""
    return (PROJECT_ROOT / name).exists() or (PROJECT_ROOT / f"{name}.py").is_file()


def module_file(dotted: str) -> Path | None:
    base = PROJECT_ROOT / dotted.replace(".", "/")
    for candidate in (base.with_name(base.name + ".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return base if base.is_dir() else None


def defines(source: str, name: str) -> bool:
    """Whether `name` is defined or imported in `source` (a function, class, assignment or import)."""
    pattern = rf"^\s*(?:async def|def|class) {name}\b|^\s*{name}\s*[:=]|\bimport\b[^\n]*\b{name}\b|^\s+{name},?$"
    return re.search(pattern, source, re.M) is not None


def dotted_name_resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        found = module_file(".".join(parts[:split]))
        if found is None:
            continue
        rest = parts[split:]
        if not rest:
            return True
        source = found.read_text(encoding="utf-8") if found.is_file() else ""
        return all(defines(source, name) for name in rest)
    return False


def stale_names(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    where = path.relative_to(PROJECT_ROOT).as_posix()
    named = [
        *(name for name in PACKAGE_PATH.findall(text) if not path_exists(name)),
        *(name for name in DOTTED_NAME.findall(text) if not dotted_name_resolves(name)),
    ]
    return [f"{where} names {name}" for name in named if (where, name) not in KEPT_NAMES]


def test_every_name_of_the_package_in_its_sources_and_docs_exists() -> None:
    assert [line for path in naming_files() for line in stale_names(path)] == []
    assert dotted_name_resolves("stages.storage.paths.RunPaths") and dotted_name_resolves("stages.execution")
    assert not dotted_name_resolves("stages.records.json_values") and not dotted_name_resolves("stages.paths.Nope")
