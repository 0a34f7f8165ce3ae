"""The page writer (`stages.pages.writer`): every page's template and script ship with the package, a page's own
script is the only one allowed to run, values are escaped, and links between pages work from disk."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib

from stages.pages import writer
from stages.pages.writer import COMPARE_PAGE, REPORT_PAGE, RUNS_PAGE, STEP_TEMPLATE, TEMPLATES_DIR, Page

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PAGES = (REPORT_PAGE, COMPARE_PAGE, RUNS_PAGE)


def test_every_page_has_its_template_and_script_in_the_templates_folder() -> None:
    for page in PAGES:
        assert (TEMPLATES_DIR / page.template).is_file(), page.template
        assert (TEMPLATES_DIR / page.script).is_file(), page.script
    assert (TEMPLATES_DIR / STEP_TEMPLATE).is_file()
    pages = {name for page in PAGES for name in (page.template, page.script)}
    included = {path.name for path in TEMPLATES_DIR.iterdir() if path.name.startswith("_")}
    assert {path.name for path in TEMPLATES_DIR.iterdir()} == pages | included  # no template nobody renders


def test_the_package_data_ships_the_templates_folder() -> None:
    package_data = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "package-data"
    ]
    package = ".".join(TEMPLATES_DIR.parent.relative_to(PROJECT_ROOT).parts)
    assert package_data.get(package) == [f"{TEMPLATES_DIR.name}/*"], package_data


@pytest.fixture
def own_templates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The writer reading its templates from `tmp_path` (its cached environment and scripts dropped before and after)."""
    monkeypatch.setattr(writer, "TEMPLATES_DIR", tmp_path)
    writer.environment.cache_clear()
    writer.page_script.cache_clear()
    yield tmp_path
    writer.environment.cache_clear()
    writer.page_script.cache_clear()


def test_a_page_allows_only_its_own_script_and_escapes_every_value(own_templates: Path) -> None:
    (own_templates / "page.html.j2").write_text(
        "<meta content=\"script-src '{{ script_hash }}'\"><p>{{ value }}</p><script>{{ script }}</script>",
        encoding="utf-8",
    )
    script = "document.title = 'x' < 'y';"
    (own_templates / "page.js").write_text(script, encoding="utf-8")
    html = writer.render(Page("page.html.j2", "page.js"), value="<script>alert(1)</script>")
    assert "<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>" in html
    assert f"<script>{script}</script>" in html  # the page's own script, as written
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    assert f"script-src 'sha256-{digest}'" in html


def test_a_link_between_pages_is_relative_so_it_works_from_disk(tmp_path: Path) -> None:
    report = tmp_path / "results" / "run-a" / "report.html"
    assert writer.relative_link(tmp_path / "results", report, "headline") == "run-a/report.html#headline"
    assert writer.relative_link(tmp_path / "results" / "run-b", report, "p-1") == "../run-a/report.html#p-1"
    assert writer.step_anchor("7.2", 1) == "s-7.2-a1" and writer.problem_anchor("7") == "p-7"
