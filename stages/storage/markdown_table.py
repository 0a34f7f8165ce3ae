"""The one Markdown table writer of every Markdown page (summary.md, runs.md, compare.md, docs/statuses.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def markdown_table(
    header: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[bool], *, padded: bool = True
) -> list[str]:
    """A pipe table padded so it also reads as plain text (unless not `padded`: each cell as narrow as its text,
    compare.md's tables); `right` marks right-aligned columns. A `|` inside a cell is escaped, so it stays in its
    cell."""
    cells = [[str(value).replace("|", "\\|") for value in row] for row in rows]
    widths = [
        max([len(header[col])] + [len(row[col]) for row in cells] + [3]) if padded else 1 for col in range(len(header))
    ]

    def line(values: Sequence[str]) -> str:
        aligned = [
            value.rjust(widths[col]) if right[col] else value.ljust(widths[col]) for col, value in enumerate(values)
        ]
        return "| " + " | ".join(aligned if padded else values) + " |"

    rule = (
        "|"
        + "|".join(
            ("-" * (widths[col] + 1) + ":") if right[col] else ("-" * (widths[col] + 2)) for col in range(len(header))
        )
        + "|"
    )
    return [line(header), rule, *(line(row) for row in cells)]
