"""The run index page in headless Chromium: every run listed, filters by setting, sorting, the plots with
their Pareto fronts and marked settings, and links to each run's report (tests/support/browser.py drives
the browser)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stages.runs.page import write_run_index
from tests.support.browser import browser, open_page  # noqa: F401 - the browser fixture
from tests.support.run_artifacts import (
    make_settings,
    results,  # noqa: F401 - the runs fixture
)

pytestmark = pytest.mark.slow


@pytest.fixture
def page(results, tmp_path: Path) -> Path:  # noqa: F811
    write_run_index(make_settings(tmp_path))
    return results.runs_page


def shown_models(driver) -> list[str]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#runs tr.run')).filter(r => !r.hidden)"
        ".map(r => r.children[0].textContent.trim());"
    )


def test_index_lists_filters_and_sorts_runs(browser, page: Path) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    open_page(browser, page)
    assert sorted(shown_models(browser)) == ["cheap", "pending", "strong", "tokens-only", "wasteful"]
    Select(browser.find_element(By.ID, "filter-split")).select_by_value("test")
    assert sorted(shown_models(browser)) == ["cheap", "pending", "strong", "wasteful"]
    Select(browser.find_element(By.ID, "filter-background")).select_by_value("no background")
    assert sorted(shown_models(browser)) == ["cheap", "strong", "wasteful"]
    assert browser.find_element(By.ID, "shown-count").text == "3 of 5 runs"
    browser.find_element(By.CSS_SELECTOR, "th[data-key='cost']").click()  # ascending
    assert shown_models(browser) == ["cheap", "strong", "wasteful"] or shown_models(browser) == [
        "cheap",
        "wasteful",
        "strong",
    ]
    browser.find_element(By.CSS_SELECTOR, "th[data-key='resolve']").click()
    browser.find_element(By.CSS_SELECTOR, "th[data-key='resolve']").click()  # descending
    assert shown_models(browser)[0] == "strong"
    # points of filtered-out runs are dimmed in the plots
    dimmed = browser.execute_script("return document.querySelectorAll('g.point.dim').length")
    assert dimmed == 1  # tokens-only, in the other setting's plot


def test_index_plots_mark_the_front_and_the_published_settings(browser, page: Path) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    open_page(browser, page)
    figures = browser.find_elements(By.CSS_SELECTOR, "figure")
    assert len(figures) == 2
    realistic = browser.find_element(By.ID, "plot-test-no-background")
    assert "the SciCode paper's main setting" in realistic.find_element(By.TAG_NAME, "figcaption").text
    assert len(realistic.find_elements(By.CSS_SELECTOR, "circle.on-front")) == 2  # cheap and strong
    assert len(realistic.find_elements(By.CSS_SELECTOR, "circle.off-front")) == 1  # wasteful
    assert realistic.find_element(By.CSS_SELECTOR, "polyline.front").get_attribute("points")
    published = browser.find_element(By.ID, "plot-all-with-background")
    caption = published.find_element(By.TAG_NAME, "figcaption").text
    assert "AgentCompass" in caption and "Artificial Analysis" in caption
    assert "total tokens" in published.text
    strong_row = browser.find_element(By.CSS_SELECTOR, "#runs tr.run[data-search^='strong']")
    assert "$6.00" in strong_row.text and "18.8% to 81.2%" in strong_row.text
    strong_row.find_element(By.CSS_SELECTOR, "a.report-link").click()
    assert browser.current_url.endswith("strong/test-tool_use-nobg/report.html#headline")
    assert "SciCode report: strong" in browser.title


LABEL_BOXES = """
return Array.from(document.querySelectorAll('figure svg g.point text')).map(t => {
  const b = t.getBoundingClientRect();
  return [t.textContent, b.left, b.top, b.right, b.bottom];
});
"""


def test_run_labels_in_the_cost_plot_do_not_overlap(browser, tmp_path: Path) -> None:  # noqa: F811
    """Runs of one setting at the same rate and nearly the same cost (local models scoring 0%): each label gets
    its own place, and the page shows every one."""
    from tests.support.run_artifacts import PRICED, make_summarized_run

    for model in ("smollm2-135m", "smollm2-135m-chatml", "qwen2.5-0.5b", "tinyllama-1.1b"):
        make_summarized_run(tmp_path, model, [False, False], split="validation", **PRICED)
    write_run_index(make_settings(tmp_path))
    open_page(browser, tmp_path / "results" / "scicode" / "runs.html")
    boxes = browser.execute_script(LABEL_BOXES)
    assert len(boxes) == 4, boxes
    for index, (text, left, top, right, bottom) in enumerate(boxes):
        assert right > left and bottom > top, text
        for other, o_left, o_top, o_right, o_bottom in boxes[index + 1 :]:
            apart = right <= o_left or o_right <= left or bottom <= o_top or o_bottom <= top
            assert apart, f"the labels {text!r} and {other!r} overlap: {boxes}"
    browser.save_screenshot(str(tmp_path / "runs-plot.png"))
    print(f"screenshot: {tmp_path / 'runs-plot.png'}")


INDEX_WIDTHS = (1280, 1440, 1920)
ROW_HEIGHT_LIMIT = 110  # px: a run's row holds two lines of numbers and a short state, not a paragraph


@pytest.mark.parametrize("width", INDEX_WIDTHS)
def test_every_index_column_is_visible_without_horizontal_scrolling(browser, page: Path, width: int) -> None:  # noqa: F811
    """At 1,280 px and wider the last columns (`marked`, `report`, `caveats`) are on screen, the page does not
    scroll sideways, and no run's row grows tall."""
    browser.set_window_size(width, 900)
    try:
        open_page(browser, page)
        inner = browser.execute_script("return document.documentElement.clientWidth")
        assert browser.execute_script("return document.documentElement.scrollWidth") <= inner
        headers = browser.execute_script(
            "return Array.from(document.querySelectorAll('#runs thead th')).map(th => "
            "[th.textContent.trim(), th.getBoundingClientRect().right]);"
        )
        for name in ("marked", "report", "caveats"):
            right = next(edge for text, edge in headers if text == name)
            assert right <= inner, f"{name} ends at {right} px of {inner}"
        heights = browser.execute_script(
            "return Array.from(document.querySelectorAll('#runs tr.run')).map(r => r.getBoundingClientRect().height);"
        )
        assert max(heights) <= ROW_HEIGHT_LIMIT, heights
        browser.save_screenshot(str(page.parent / f"runs-{width}.png"))
    finally:
        browser.set_window_size(1400, 1000)
