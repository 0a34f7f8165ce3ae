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
