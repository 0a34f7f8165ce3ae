"""The glossary of statuses: every status a generation file or a step's verdict can hold, what it means and how it
counts in the denominators, declared once. summary.md, report.html, compare.md and the generated page
`docs/statuses.md` (`python -m scripts.statuses_page` writes it) all render these entries.

A step's verdict status is what the tables count (summary.json `status_counts`, the step grid, compare); a failing
verdict of a step the model never answered is counted as `not_generated`, not as `fail`, so an outage of the
server is never read as a wrong answer of the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from stages.storage.markdown_table import markdown_table

StatusRecord = Literal["verdict", "generation"]


@dataclass(frozen=True)
class StatusEntry:
    """One status: the record that holds it, its meaning, whether it is in the step denominator and passes, and (a
    generation status) the verdict status it is scored as ("" for the verdict of the step's tests)."""

    status: str
    record: StatusRecord
    meaning: str
    in_step_denominator: bool
    passes: bool = False
    scored_as: str = ""

    @property
    def counts(self) -> str:
        """How the status counts in `subproblem` and the resolve rate, in words."""
        if self.record == "generation":
            return f"as its verdict `{self.scored_as}`" if self.scored_as else "as the verdict of the step's tests"
        if self.passes:
            return "passed: in the step denominator and its numerator"
        if self.in_step_denominator:
            return "not passed: in the step denominator; its problem is not resolved"
        return "not in the step denominator (not scored); it does not keep its problem from being resolved"


VERDICT_ENTRIES: tuple[StatusEntry, ...] = (
    StatusEntry("pass", "verdict", "the step's code passed every official test of the step", True, passes=True),
    StatusEntry("fail", "verdict", "the model's code ran and failed a test (or raised)", True),
    StatusEntry("timeout", "verdict", "the step's tests ran past the time limit", True),
    StatusEntry("parse_error", "verdict", "the answer holds no code to run (no code block, empty, cut off)", True),
    StatusEntry(
        "eval_error",
        "verdict",
        "the step could not be evaluated (no targets for it, the checker failed); its problem is listed as failed",
        True,
    ),
    StatusEntry("skipped", "verdict", "a prefilled step: the official code, never asked of the model", False),
    StatusEntry(
        "not_generated",
        "verdict",
        "the model never answered the step (the request failed, e.g. the server was down; the prompt did not fit "
        "the context; a later step of such a problem); not the model's wrong answer",
        True,
    ),
    StatusEntry(
        "no_verdict",
        "verdict",
        "a scored step without a verdict (no details file, the problem not scored, or a step missing from it)",
        True,
    ),
)
GENERATION_ENTRIES: tuple[StatusEntry, ...] = (
    StatusEntry("ok", "generation", "answered; its code is run against the step's tests", True),
    StatusEntry("truncated", "generation", "the answer was cut off at max_tokens; its code, if any, is run", True),
    StatusEntry("no_code", "generation", "answered without code", True, scored_as="parse_error"),
    StatusEntry("error", "generation", "the request failed after its retries", True, scored_as="not_generated"),
    StatusEntry(
        "prefilled", "generation", "a prefilled step, not asked: its official code", False, scored_as="skipped"
    ),
    StatusEntry(
        "context_exceeded", "generation", "the prompt did not fit the server's context", True, scored_as="not_generated"
    ),
    StatusEntry(
        "not_generated",
        "generation",
        "a later step of a problem whose generation stopped",
        True,
        scored_as="not_generated",
    ),
)
GLOSSARY: tuple[StatusEntry, ...] = VERDICT_ENTRIES + GENERATION_ENTRIES
GLOSSARY_LINK = "docs/statuses.md in the project"


def verdict_entry(status: str) -> StatusEntry | None:
    return next((entry for entry in VERDICT_ENTRIES if entry.status == status), None)


def glossary_rows(entries: Sequence[StatusEntry]) -> list[tuple[str, str, str, str]]:
    """(status, record, meaning, how it counts) of each entry."""
    return [(f"`{entry.status}`", entry.record, entry.meaning, entry.counts) for entry in entries]


def glossary_markdown(entries: Sequence[StatusEntry] = GLOSSARY) -> list[str]:
    """The glossary as a Markdown table."""
    return markdown_table(("status", "record", "meaning", "counts"), glossary_rows(entries), (False,) * 4)
