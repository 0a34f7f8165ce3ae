"""The summary's fingerprint, carried by every summary output: summary.json (its `fingerprint`), summary.md (a
comment on its last line) and report.html (a `<meta>` element in its head).

The summarize task is up to date only when all three carry the current fingerprint (`stages.summarize.stage.
summary_is_current`): a run stopped between two of the writes leaves an output that carries the old one, and the next
run writes them all again instead of leaving a stale report beside a current summary.
"""

from __future__ import annotations

import re
from pathlib import Path

MARK_NAME = "scicode-summary-fingerprint"
_CARRIED = re.compile(rf'{MARK_NAME}(?::\s*|"\s+content=")([0-9a-f]{{64}})')
HEAD_BYTES = 16 * 1024  # where report.html's head, with its mark, ends (the page's first lines)
TAIL_BYTES = 4 * 1024  # where summary.md's last line, with its mark, starts


def markdown_mark(fingerprint: str) -> str:
    """The line summary.md ends with (a comment: nothing shows when the Markdown is rendered)."""
    return f"<!-- {MARK_NAME}: {fingerprint} -->"


def html_mark(fingerprint: str) -> str:
    """The element report.html's head carries."""
    return f'<meta name="{MARK_NAME}" content="{fingerprint}">'


def carried_fingerprint(path: Path) -> str | None:
    """The fingerprint a summary.md or report.html carries (in its first or last bytes); None when the file is
    absent, unreadable or carries none."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(HEAD_BYTES)
            size = handle.seek(0, 2)
            handle.seek(max(size - TAIL_BYTES, len(head)))
            tail = handle.read(TAIL_BYTES)
    except OSError:
        return None
    found = _CARRIED.search((head + tail).decode("utf-8", "replace"))
    return found.group(1) if found else None
