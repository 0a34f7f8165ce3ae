"""`doit runs`: the run index (`stages.runs.index` finds the runs and renders runs.md) and its page `runs.html`:
the table rows and the plots, drawn as inline SVG (no network, no image file), one per split and background
setting: resolve rate (with its 95% Wilson interval) against cost, or against total tokens where some run of the
setting has no cost; the Pareto front is marked and joined.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from stages.config.settings import Settings
from stages.numbers.pricing import money
from stages.runs.index import (
    MARKED_SETTINGS,
    IndexRow,
    MarkedSetting,
    SettingFront,
    background_text,
    index_markdown,
    index_rows,
    setting_fronts,
    x_value,
)
from stages.storage.artifacts import atomic_write_text
from stages.storage.paths import ResultsPaths

WIDTH, HEIGHT = 640, 360
LEFT, RIGHT, TOP, BOTTOM = 64, 24, 16, 52
HEADROOM = 1.12  # the x axis ends past the largest value, so no point sits on the frame


# Run labels: 11 px text (runs.html.j2) whose boxes must not overlap. A character's width is taken generously
# (digits and capitals of the page's sans-serif font are about 6-7 px at that size), so estimated boxes cover drawn ones.
LABEL_CHAR_PX = 7.0
LABEL_LINE_PX = 14.0  # a label's height with its spacing (an 11 px font draws a box about 13 px high)
LABEL_RISE_PX = 6.0  # a label's baseline sits this far above its point when there is room
LABEL_GAP_PX = 8.0  # from the point to the label's near end


@dataclass(frozen=True)
class LabelBox:
    """Where a label's text is drawn: its baseline `y`, and its horizontal extent."""

    left: float
    right: float
    y: float

    def overlaps(self, other: LabelBox) -> bool:
        return self.left < other.right and other.left < self.right and abs(self.y - other.y) < LABEL_LINE_PX


def label_box(px: float, y: float, text: str, end: bool) -> LabelBox:
    width = LABEL_CHAR_PX * len(text)
    near = px - LABEL_GAP_PX if end else px + LABEL_GAP_PX
    return LabelBox(near - width, near, y) if end else LabelBox(near, near + width, y)


def label_offsets(limit: int) -> list[float]:
    """The baselines tried for a label, as offsets from its usual place: there, then a line lower, a line higher,
    two lines lower, ..."""
    offsets = [0.0]
    for step in range(1, limit + 1):
        offsets += [step * LABEL_LINE_PX, -step * LABEL_LINE_PX]
    return offsets


def place_labels(anchors: Sequence[tuple[float, float, str, bool]]) -> list[float]:
    """The baseline of each label (anchors: the point's x and y, the text, whether it ends left of the point), so
    that no two labels' boxes overlap: each label, top to bottom, takes the nearest free line to its point within the
    plot's frame (where no line is free, the usual place)."""
    top, bottom = TOP + LABEL_LINE_PX - 2, HEIGHT - BOTTOM - 2
    placed: list[LabelBox] = []
    baselines = [0.0] * len(anchors)
    order = sorted(range(len(anchors)), key=lambda index: (anchors[index][1], anchors[index][0]))
    for index in order:
        px, py, text, end = anchors[index]
        usual = py - LABEL_RISE_PX if py - LABEL_RISE_PX >= top else py + LABEL_LINE_PX
        tried = (usual + offset for offset in label_offsets(int((bottom - top) / LABEL_LINE_PX) + 1))
        candidates = (label_box(px, y, text, end) for y in tried if top <= y <= bottom)
        box = next((box for box in candidates if not any(box.overlaps(other) for other in placed)), None)
        box = box or label_box(px, usual, text, end)
        placed.append(box)
        baselines[index] = round(box.y, 2)
    return baselines


@dataclass(frozen=True)
class Tick:
    position: float
    label: str


@dataclass(frozen=True)
class PlotPoint:
    row_id: str
    label: str
    x_text: str
    y_text: str
    px: float
    py: float
    py_low: float
    py_high: float
    on_front: bool
    label_end: bool  # the label goes left of the point (points near the right edge)
    label_y: float = 0.0  # the label's baseline (place_labels: no two labels overlap)

    @property
    def label_x(self) -> float:
        return round(self.px - 8 if self.label_end else self.px + 8, 2)


@dataclass(frozen=True)
class PlotGroup:
    split: str
    background: str
    x_kind: str  # "cost" or "tokens"
    points: tuple[PlotPoint, ...]
    front_path: str
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    marks: tuple[MarkedSetting, ...]
    not_plotted: tuple[str, ...]

    @property
    def title(self) -> str:
        return f"split {self.split}, {self.background}"

    @property
    def x_label(self) -> str:
        return "cost of the run (USD)" if self.x_kind == "cost" else "total tokens of the run"

    @property
    def front_points(self) -> tuple[PlotPoint, ...]:
        return tuple(sorted((point for point in self.points if point.on_front), key=lambda point: point.px))

    @property
    def plot_id(self) -> str:
        return "plot-" + re.sub(r"[^A-Za-z0-9_-]+", "-", f"{self.split}-{self.background}").strip("-")


def row_id(row: IndexRow) -> str:
    return f"run-{row.run_dir.parent.name}--{row.run_dir.name}"


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least `top` (about `count` of them)."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    return [step * i for i in range(math.ceil(top / step - 1e-9) + 1)]


def _x_text(kind: str, value: float) -> str:
    return money(value) if kind == "cost" else f"{int(value):,} tokens"


def _tick_text(kind: str, value: float) -> str:
    if kind == "cost":
        return f"${value:g}"
    return f"{value / 1e6:g}M" if value >= 1e6 else (f"{value / 1e3:g}k" if value >= 1e3 else f"{value:g}")


def plot_group(found: SettingFront) -> PlotGroup:
    kind = found.x_kind
    xs = [x_value(row, kind) or 0.0 for row in found.plotted]
    ticks = nice_ticks(HEADROOM * max(xs, default=0.0))
    span = ticks[-1] or 1.0
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(value: float) -> float:
        return round(LEFT + inner_w * value / span, 2)

    def py(rate: float) -> float:
        return round(TOP + inner_h * (1.0 - rate), 2)

    def point(row: IndexRow, x: float) -> PlotPoint:
        rate = row.resolve_rate or 0.0
        low, high = row.resolve_interval or (rate, rate)
        return PlotPoint(
            row_id=row_id(row),
            label=f"{row.model} / {row.run}",
            x_text=_x_text(kind, x),
            y_text=f"{100.0 * rate:.1f}% resolved",
            px=px(x),
            py=py(rate),
            py_low=py(low),
            py_high=py(high),
            on_front=row in found.front,
            label_end=px(x) > LEFT + 0.6 * inner_w,
        )

    unplaced = [point(row, x) for row, x in zip(found.plotted, xs)]
    baselines = place_labels([(p.px, p.py, p.label, p.label_end) for p in unplaced])
    points = tuple(dataclasses.replace(p, label_y=y) for p, y in zip(unplaced, baselines))
    return PlotGroup(
        split=found.split,
        background=found.background,
        x_kind=kind,
        points=points,
        front_path=_step_path([p for p in points if p.on_front]),
        x_ticks=tuple(Tick(px(value), _tick_text(kind, value)) for value in ticks),
        y_ticks=tuple(Tick(py(value), f"{100 * value:.0f}%") for value in (0.0, 0.25, 0.5, 0.75, 1.0)),
        marks=found.marks,
        not_plotted=tuple(f"{row.model} / {row.run}" for row in found.not_plotted),
    )


def _step_path(front: Sequence[PlotPoint]) -> str:
    """An SVG polyline through the front in cost order: the best rate holds until the next front point."""
    ordered = sorted(front, key=lambda point: point.px)
    corners: list[str] = []
    for index, point in enumerate(ordered):
        if index:
            corners.append(f"{point.px},{ordered[index - 1].py}")
        corners.append(f"{point.px},{point.py}")
    return " ".join(corners)


def plot_groups(rows: Sequence[IndexRow]) -> list[PlotGroup]:
    """One plot per (split, background) setting that has a summarized run."""
    return [plot_group(found) for found in setting_fronts(rows)]


# ---------------------------------------------------------------------------
# The page
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PageRow:
    """A table row of the page with its sort values."""

    row: IndexRow
    row_id: str
    report_link: str | None
    marks: str
    background: str


def page_rows(rows: Sequence[IndexRow], page_dir: Path) -> list[PageRow]:
    from stages.pages.writer import relative_link

    return [
        PageRow(
            row=row,
            row_id=row_id(row),
            report_link=relative_link(page_dir, row.report, "headline") if row.report else None,
            marks=" ".join(mark.key for mark in row.marks),
            background=background_text(row.with_background),
        )
        for row in rows
    ]


def filter_values(rows: Sequence[IndexRow]) -> dict[str, list[str]]:
    """The values each filter offers: those present in the rows."""
    return {
        "split": sorted({row.split_label for row in rows}),
        "mode": sorted({row.mode or "unknown" for row in rows}),
        "background": sorted({background_text(row.with_background) for row in rows}),
        "carry": sorted({row.carry or "unknown" for row in rows}),
    }


def write_run_index(settings: Settings) -> Path:
    """Write `<results_dir>/scicode/runs.md` and `runs.html` and return the Markdown path (both are printed)."""
    results = ResultsPaths(Path(settings.results_dir))
    rows = index_rows(results)
    atomic_write_text(results.runs_index, index_markdown(rows, results.root))
    atomic_write_text(results.runs_page, render_page(rows, results.root))
    print(f"run index: {results.runs_index} ({len(rows)} runs)")
    print(f"run index page: {results.runs_page}")
    return results.runs_index


def render_page(rows: Sequence[IndexRow], page_dir: Path) -> str:
    from stages.pages.writer import RUNS_PAGE, render

    return render(
        RUNS_PAGE,
        rows=page_rows(rows, page_dir),
        plots=plot_groups(rows),
        filters=filter_values(rows),
        marked=MARKED_SETTINGS,
        page_dir=str(page_dir),
        size=(WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM),
    )
