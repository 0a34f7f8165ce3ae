"""How every HTML page is written: Jinja2 with autoescaping on (model output is untrusted text and is only ever shown
as text) from the templates in `stages/pages/templates/`, the page's own script inlined and allowed by its CSP hash
(no other script may run), so a page works offline, from disk or from an email attachment; and the links between
pages, which work when both are opened from disk."""

from __future__ import annotations

import base64
import hashlib
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup
from markupsafe import escape as markupsafe_escape

from stages.numbers.pricing import money
from stages.numbers.uncertainty.text import (
    CLUSTERED_SHORT,
    INTERVALS_SENTENCE,
    RESOLVE_SHORT,
    interval_of,
    percent,
    step_interval_label,
)

TEMPLATES_DIR = Path(__file__).with_name("templates")


@dataclass(frozen=True)
class Page:
    """A page's template and its own script, both in `TEMPLATES_DIR`."""

    template: str
    script: str


REPORT_PAGE = Page("report.html.j2", "report.js")  # a run's report.html
COMPARE_PAGE = Page("compare.html.j2", "compare.js")  # the comparison of two runs
RUNS_PAGE = Page("runs.html.j2", "runs.js")  # the index of a results folder
STEP_TEMPLATE = "_step.html.j2"  # the views of one step of a report, rendered apart and stored compressed

CODE_SPAN = re.compile(r"`([^`\n]+)`")


def code_spans(value: object) -> Markup:
    """Text written for Markdown as a page shows it: escaped, each `code span` a <code> element (no backtick shows)."""
    escaped = str(markupsafe_escape(str(value)))
    return Markup(CODE_SPAN.sub(r"<code>\1</code>", escaped).replace("`", ""))


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        autoescape=True,  # every value is escaped: model output never becomes markup or script
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(interval=interval_of, money=money, percent=percent, code_spans=code_spans)
    env.globals.update(
        intervals_sentence=INTERVALS_SENTENCE,
        resolve_short=RESOLVE_SHORT,
        clustered_short=CLUSTERED_SHORT,
        step_interval_label=step_interval_label,
    )
    return env


@lru_cache(maxsize=4)
def page_script(name: str) -> tuple[Markup, str]:
    """The page's own script (trusted, from the package) and its CSP hash: only that script may run."""
    text = (TEMPLATES_DIR / name).read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")
    return Markup(text), f"sha256-{digest}"


def render(page: Page, **context: Any) -> str:
    """The page as HTML, its script inlined and allowed by hash."""
    script, script_hash = page_script(page.script)
    return environment().get_template(page.template).render(script=script, script_hash=script_hash, **context)


def step_anchor(step_id: str, attempt: int = 0) -> str:
    """The fragment of a report that opens a step view: `s-<step id>-a<attempt>`."""
    return f"s-{step_id}-a{attempt}"


def problem_anchor(problem_id: str) -> str:
    """The fragment of a report that shows a problem's row: `p-<problem id>`."""
    return f"p-{problem_id}"


def relative_link(from_dir: Path, target: Path, anchor: str) -> str:
    """A link from a page in `from_dir` to `target#anchor` that works when both are opened from disk."""
    return f"{Path(os.path.relpath(Path(target).resolve(), Path(from_dir).resolve())).as_posix()}#{anchor}"
