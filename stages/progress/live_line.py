"""Fitting a live status line into a terminal's width: lower-value fields give way first, the times stay.

A line is a sequence of `Field`s joined by ", ", optionally after a progress bar. `fit_line(fields, columns)`
tries, from the richest to the plainest, until one fits in `columns - 1` characters (the last column is left
free, so a terminal never wraps the line it redraws in place):

1. every field with its long label (`steps passed 12/14 (85.7%)`), and a bar of `BAR_WIDTHS[0]`;
2. the short labels (`passed 12/14 (85.7%)`);
3. then, in the order of their `drop` rank, fields give way (to their `lesser` form when they have one, else
   to nothing), and the bar shrinks and goes (the `BAR_SHRINKS` ranks).

Fields without a `drop` rank (the counts, elapsed and ETA) are always kept; should even they not fit, the line
loses its start ("..."), never the times at its end. `columns_of(stream)` is the width of the terminal a stream writes to (else $COLUMNS, else 80).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

DEFAULT_COLUMNS = 80
BAR_WIDTHS = (20, 10, 0)
# The bar shrinks to BAR_WIDTHS[i + 1] once fields of drop rank BAR_SHRINKS[i] have given way.
BAR_SHRINKS = (30, 40)
SEPARATOR = ", "
CUT = "..."


@dataclass(frozen=True)
class Field:
    """One part of a status line: its text with a long and a short label, and how it gives way (`drop`: the
    rank at which it is replaced by `lesser`, or removed; None: never)."""

    long: str
    short: str | None = None
    drop: int | None = None
    lesser: Field | None = None

    def text(self, short: bool) -> str:
        return self.short if short and self.short is not None else self.long

    def at(self, dropped_rank: int) -> Field | None:
        """This field once every rank up to `dropped_rank` has given way."""
        field: Field | None = self
        while field is not None and field.drop is not None and field.drop <= dropped_rank:
            field = field.lesser
        return field


@dataclass(frozen=True)
class FittedLine:
    bar_width: int  # 0: no bar
    text: str  # the fields, after the bar

    @property
    def width(self) -> int:
        return len(self.text) + (self.bar_width + 3 if self.bar_width else 0)  # "|" bar "| "


def _ranks(fields: Sequence[Field]) -> list[int]:
    ranks: set[int] = set(BAR_SHRINKS)
    for field in fields:
        current: Field | None = field
        while current is not None and current.drop is not None:
            ranks.add(current.drop)
            current = current.lesser
    return sorted(ranks)


def _bar_width(dropped_rank: int) -> int:
    shrunk = sum(1 for rank in BAR_SHRINKS if rank <= dropped_rank)
    return BAR_WIDTHS[shrunk]


def _join(fields: Sequence[Field], dropped_rank: int, short: bool) -> str:
    kept = (field.at(dropped_rank) for field in fields)
    return SEPARATOR.join(field.text(short) for field in kept if field is not None)


def layouts(fields: Sequence[Field]) -> list[FittedLine]:
    """Every layout `fit_line` tries, richest first."""
    none_dropped = min(_ranks(fields), default=1) - 1
    tried = [
        FittedLine(BAR_WIDTHS[0], _join(fields, none_dropped, short=False)),
        FittedLine(BAR_WIDTHS[0], _join(fields, none_dropped, short=True)),
    ]
    tried += [FittedLine(_bar_width(rank), _join(fields, rank, short=True)) for rank in _ranks(fields)]
    return tried


def fit_line(fields: Sequence[Field], columns: int) -> FittedLine:
    """The richest layout that fits in `columns - 1` characters; otherwise the plainest one with its start cut
    (the times are at the end)."""
    room = max(columns - 1, 1)
    tried = layouts(fields)
    for layout in tried:
        if layout.width <= room:
            return layout
    plainest = tried[-1].text
    return FittedLine(0, CUT + plainest[len(plainest) - room + len(CUT) :] if room > 2 * len(CUT) else plainest[-room:])


def plain_text(fields: Sequence[Field]) -> str:
    """The fields with their long labels, for a line that is printed rather than redrawn."""
    return SEPARATOR.join(field.long for field in fields)


def columns_of(stream: TextIO) -> int:
    """Columns of the terminal `stream` writes to; $COLUMNS, else 80, when that cannot be told."""
    try:
        return max(os.get_terminal_size(stream.fileno()).columns, 1)
    except (AttributeError, OSError, ValueError):
        pass
    try:
        return max(int(os.environ.get("COLUMNS", "")), 1)
    except ValueError:
        return DEFAULT_COLUMNS
