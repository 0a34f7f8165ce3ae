"""Headless Chromium driven through chromedriver (selenium), for the tests that open the pipeline's pages:
the `browser` fixture (one browser per test module) and the page helpers.

Outside CI the tests skip when Chromium, chromedriver or selenium is missing; with CI=true they fail instead.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import pytest

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome")
DRIVER_NAMES = ("chromedriver",)


def _first_found(names: tuple[str, ...]) -> str | None:
    return next((found for name in names if (found := shutil.which(name))), None)


def _missing_browser(reason: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI must run the browser tests: .ci/run installs chromium and chromium-driver)")
    pytest.skip(f"{reason}: install Debian's chromium and chromium-driver to run the browser tests")


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    chromium, driver_binary = _first_found(BROWSER_NAMES), _first_found(DRIVER_NAMES)
    if chromium is None or driver_binary is None:
        _missing_browser(f"no {'chromium' if chromium is None else 'chromedriver'} on PATH")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing_browser("the selenium package is not installed")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        "--allow-file-access-from-files",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=driver_binary), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def open_page(driver: WebDriver, path: Path, fragment: str = "") -> float:
    """Open `path` from disk and return the time to its load event (navigation timing, seconds)."""
    driver.get(path.resolve().as_uri() + (f"#{fragment}" if fragment else ""))
    timing = driver.execute_script(
        "var n = performance.getEntriesByType('navigation')[0]; return n ? n.loadEventEnd : null;"
    )
    return float(timing) / 1000.0 if timing else float("nan")


def wait_for_step(driver: WebDriver, anchor: str) -> None:
    """Step views are inflated asynchronously: wait until the panel shows `anchor`."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 10).until(
        lambda d: d.execute_script("return document.getElementById('step-view').dataset.step") == anchor
    )


# The WCAG contrast ratio of each element's text against the background it is drawn on (the first ancestor with
# an opaque background), computed by the browser from the styles it applied.
CONTRAST_SCRIPT = """
function rgb(text) { const m = text.match(/[\\d.]+/g).map(Number); return {r: m[0], g: m[1], b: m[2], a: m.length > 3 ? m[3] : 1}; }
function lum(c) { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
  return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); }
function background(el) { for (let e = el; e; e = e.parentElement) { const c = rgb(getComputedStyle(e).backgroundColor);
  if (c.a > 0.5) return c; } return {r: 255, g: 255, b: 255, a: 1}; }
return Array.from(document.querySelectorAll(arguments[0])).filter(el => el.offsetParent !== null).map(el => {
  const fg = lum(rgb(getComputedStyle(el).color)), bg = lum(background(el));
  return [el.textContent.trim(), (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05)]; });
"""
MIN_CONTRAST = 4.5  # WCAG AA for text under 18 pt


def low_contrast(driver: WebDriver, css: str) -> list[tuple[str, float]]:
    """The visible elements matching `css` whose text has less than MIN_CONTRAST against its background."""
    found = driver.execute_script(CONTRAST_SCRIPT, css)
    assert found, f"no visible element matches {css}"
    return [(text, round(ratio, 2)) for text, ratio in found if ratio < MIN_CONTRAST]
