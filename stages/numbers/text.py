"""How a run's numbers and the names beside them are written in text, the same in summary.md, the comparison and the
runs index: a rate with its denominator, a name a reader sees as a code span, and the length of the caveats line."""

from __future__ import annotations

from stages.execution.untrusted import shown

NAME_LIMIT = 200  # characters of a name shown in Markdown
CAVEATS_LIMIT = 1000  # characters of the caveats line


def name_span(name: object) -> str:
    """A name a reader sees (`model=`, `run=`, a replay file's path, a folder) as a Markdown code span: whatever the
    operator or a shared results folder put in it, no Markdown or HTML of it is rendered."""
    return shown(name, limit=NAME_LIMIT, markdown=True)


def ratio(part: int, whole: int) -> str:
    """`50/50 (100.0%)`: every rate printed with its denominator."""
    return f"{part}/{whole} ({100.0 * part / whole:.1f}%)" if whole else f"{part}/{whole} (n/a)"
