"""Plots of one run's results: PNG files, byte-identical for identical inputs.

Drawn on `matplotlib.figure.Figure` with the Agg canvas directly (no pyplot global state, so it is safe
in doit's worker threads), at a fixed size and dpi, with explicit font sizes, and without the PNG
`Software` text chunk. Inputs are plain values so this module does not depend on how they were computed.
"""

from __future__ import annotations

import io
import os
import tempfile
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

DPI = 100
FONT_SIZE = 9
TITLE_SIZE = 11
PNG_METADATA: dict[str, str | None] = {"Software": None}
PNG_FILE_MODE = 0o644  # mkstemp creates 0600; plots are meant to be read by others

# Cell states of the step grid, in legend order. Colours: the Okabe-Ito palette (colour-blind safe).
GRID_STATES: tuple[str, ...] = (
    "pass",
    "fail",
    "timeout",
    "parse_error",
    "eval_error",
    "skipped",
    "not_generated",
    "no_verdict",
    "no_step",
)
STATE_COLORS: dict[str, str] = {
    "pass": "#009E73",
    "fail": "#D55E00",
    "timeout": "#E69F00",
    "parse_error": "#CC79A7",
    "eval_error": "#0072B2",
    "skipped": "#B8B8B8",
    "not_generated": "#56B4E9",
    "no_verdict": "#3A3A3A",
    "no_step": "#FFFFFF",
}
STATE_LABELS: dict[str, str] = {
    "pass": "pass",
    "fail": "fail",
    "timeout": "timeout",
    "parse_error": "parse_error",
    "eval_error": "eval_error",
    "skipped": "skipped (prefilled)",
    "not_generated": "not generated (no answer)",
    "no_verdict": "no verdict (not scored)",
    "no_step": "no step",
}
ALWAYS_IN_LEGEND: tuple[str, ...] = ("pass", "fail", "timeout", "parse_error", "eval_error", "skipped", "no_step")

STEP_GRID_FILE = "step_status_grid.png"
STATUS_COUNTS_FILE = "status_counts.png"
CATEGORY_RATES_FILE = "pass_rate_by_category.png"


@dataclass(frozen=True)
class GridRow:
    """One problem of the step grid: its label, the status of each step in order, and whether it failed."""

    problem_id: str
    statuses: tuple[str, ...]
    passed: int
    scored: int
    failed: bool
    group: str = ""


@dataclass(frozen=True)
class CategoryBar:
    """Counts of one category (a subfield, with the field it belongs to) for the pass-rate chart."""

    category: str
    steps_passed: int
    steps_scored: int
    problems_resolved: int
    problems_total: int
    field: str = ""


@dataclass(frozen=True)
class _RateRow:
    """One row of the pass-rate chart: a field's total (bold, a group heading) or one of its subfields."""

    label: str
    bar: CategoryBar
    heading: bool


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------


def _save_png(figure: Figure, path: Path) -> Path:
    """Render `figure` to PNG bytes and write them atomically (temp file in the same folder + rename)."""
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, metadata=PNG_METADATA)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(buffer.getvalue())
        os.chmod(tmp_name, PNG_FILE_MODE)
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return path


def _figure(width_in: float, height_in: float) -> Figure:
    return Figure(figsize=(width_in, height_in), dpi=DPI)


def _set_margins(figure: Figure, *, left: float, right: float, top: float, bottom: float) -> None:
    """Margins in inches, so text keeps its room whatever the figure size."""
    width, height = figure.get_size_inches()
    figure.subplots_adjust(left=left / width, right=1 - right / width, top=1 - top / height, bottom=bottom / height)


def _title_text(figure: Figure, title: str) -> str:
    """The title wrapped to the figure width (long model names must not run off the image), every `$` literal (a
    name is no mathtext: `$\\frac{a}{b}$` is not typeset, and one matplotlib cannot parse does not fail the plot)."""
    columns = max(int(figure.get_size_inches()[0] * 10), 30)
    wrapped = "\n".join(textwrap.fill(part, columns) for part in title.split("\n"))
    return wrapped.replace("$", r"\$")


def _percent(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100.0 * part / whole:.1f}%)" if whole else f"{part}/{whole} (n/a)"


# ---------------------------------------------------------------------------
# Problem x step grid
# ---------------------------------------------------------------------------


def _grid_matrix(rows: Sequence[GridRow], columns: int) -> list[list[int]]:
    code = {state: index for index, state in enumerate(GRID_STATES)}
    return [
        [code[row.statuses[col]] if col < len(row.statuses) else code["no_step"] for col in range(columns)]
        for row in rows
    ]


def _grid_legend_states(rows: Sequence[GridRow]) -> list[str]:
    present = {status for row in rows for status in row.statuses}
    return [state for state in GRID_STATES if state in ALWAYS_IN_LEGEND or state in present]


def _mark_groups(axes: Any, rows: Sequence[GridRow]) -> bool:
    """A black rule between consecutive groups (splits) of rows and the group name beside its rows."""
    starts = [index for index in range(len(rows)) if index == 0 or rows[index].group != rows[index - 1].group]
    if len(starts) < 2:
        return False
    for start, end in zip(starts, starts[1:] + [len(rows)]):
        if start:
            axes.axhline(start - 0.5, color="black", linewidth=1.6)
        axes.annotate(
            rows[start].group,
            xy=(0.0, (start + end - 1) / 2),
            xycoords=("axes fraction", "data"),
            xytext=(-34, 0),
            textcoords="offset points",
            ha="center",
            va="center",
            rotation=90,
            fontsize=FONT_SIZE - 1,
            fontstyle="italic",
        )
    return True


def plot_step_grid(rows: Sequence[GridRow], path: Path, *, title: str) -> Path:
    """Problems (top to bottom, selection order) x steps 1..n, each cell coloured by the step's status."""
    columns = max([len(row.statuses) for row in rows] + [1])
    row_height, top, bottom = 0.24, 1.55, 0.75
    width = max(6.5, 2.2 + 0.42 * columns)
    height = top + bottom + row_height * max(len(rows), 1)
    figure = _figure(width, height)
    _set_margins(figure, left=1.2, right=1.0, top=top, bottom=bottom)
    axes = figure.add_subplot(1, 1, 1)

    colormap = ListedColormap([STATE_COLORS[state] for state in GRID_STATES])
    norm = BoundaryNorm([index - 0.5 for index in range(len(GRID_STATES) + 1)], colormap.N)
    if rows:
        axes.imshow(_grid_matrix(rows, columns), cmap=colormap, norm=norm, aspect="auto", interpolation="nearest")
    axes.set_xlim(-0.5, columns - 0.5)
    axes.set_ylim(max(len(rows), 1) - 0.5, -0.5)

    axes.set_xticks(range(columns), [str(col + 1) for col in range(columns)], fontsize=FONT_SIZE)
    axes.set_yticks(
        range(len(rows)),
        [f"{row.problem_id} *" if row.failed else row.problem_id for row in rows],
        fontsize=FONT_SIZE - 1,
    )
    for label, row in zip(axes.get_yticklabels(), rows):
        if row.failed:
            label.set_color(STATE_COLORS["fail"])
    axes.set_xticks([col - 0.5 for col in range(1, columns)], minor=True)
    axes.set_yticks([index - 0.5 for index in range(1, len(rows))], minor=True)
    axes.grid(which="minor", color="white", linewidth=1.0)
    axes.tick_params(which="minor", length=0)
    axes.tick_params(axis="x", top=True, labeltop=True)

    grouped = _mark_groups(axes, rows)
    for index, row in enumerate(rows):
        axes.text(
            columns - 0.5 + 0.15, index, f"{row.passed}/{row.scored}", va="center", ha="left", fontsize=FONT_SIZE - 1
        )
    axes.text(columns - 0.5 + 0.15, -0.9, "passed/\nscored", va="bottom", ha="left", fontsize=FONT_SIZE - 1)

    axes.set_xlabel("step (position within the problem)", fontsize=FONT_SIZE)
    axes.set_ylabel("problem", fontsize=FONT_SIZE, labelpad=30 if grouped else 4)
    if any(row.failed for row in rows):
        figure.text(
            0.1 / width,
            0.1 / height,
            "* generation or scoring failed (see summary.md)",
            ha="left",
            va="bottom",
            fontsize=FONT_SIZE - 1,
            color=STATE_COLORS["fail"],
        )
    handles = [
        Patch(facecolor=STATE_COLORS[state], edgecolor="#808080", label=STATE_LABELS[state])
        for state in _grid_legend_states(rows)
    ]
    figure.legend(
        handles=handles,
        loc="upper center",
        ncol=4,
        fontsize=FONT_SIZE - 1,
        frameon=False,
        bbox_to_anchor=(0.5, 1 - 0.62 / height),
    )
    figure.suptitle(_title_text(figure, title), fontsize=TITLE_SIZE, y=1 - 0.08 / height, va="top")
    return _save_png(figure, path)


# ---------------------------------------------------------------------------
# Status breakdown
# ---------------------------------------------------------------------------


def plot_status_counts(counts: Mapping[str, int], path: Path, *, title: str) -> Path:
    """One bar per step status (the six statuses, plus `no verdict` when some step has none), counts on top."""
    states = [
        state for state in GRID_STATES if state != "no_step" and (state in ALWAYS_IN_LEGEND or counts.get(state, 0))
    ]
    values = [int(counts.get(state, 0)) for state in states]
    figure = _figure(7.5, 4.2)
    _set_margins(figure, left=0.8, right=0.3, top=0.8, bottom=0.9)
    axes = figure.add_subplot(1, 1, 1)
    bars = axes.bar(
        range(len(states)), values, color=[STATE_COLORS[state] for state in states], edgecolor="#505050", linewidth=0.6
    )
    axes.bar_label(bars, labels=[str(value) for value in values], padding=2, fontsize=FONT_SIZE)
    axes.set_xticks(
        range(len(states)), [STATE_LABELS[state].replace(" (", "\n(") for state in states], fontsize=FONT_SIZE - 1
    )
    axes.set_ylim(0, max(values + [1]) * 1.15)
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_ylabel("steps", fontsize=FONT_SIZE)
    axes.set_xlabel("step status", fontsize=FONT_SIZE)
    axes.tick_params(axis="y", labelsize=FONT_SIZE)
    axes.spines[["top", "right"]].set_visible(False)
    axes.set_title(_title_text(figure, title), fontsize=TITLE_SIZE)
    return _save_png(figure, path)


# ---------------------------------------------------------------------------
# Pass rate by category
# ---------------------------------------------------------------------------


def _field_total(field: str, members: Sequence[CategoryBar]) -> CategoryBar:
    return CategoryBar(
        field,
        sum(b.steps_passed for b in members),
        sum(b.steps_scored for b in members),
        sum(b.problems_resolved for b in members),
        sum(b.problems_total for b in members),
        field,
    )


def _rate_rows(bars: Sequence[CategoryBar]) -> list[_RateRow]:
    """Bars grouped by field in order of first appearance: each field's total, then its subfields indented.
    Bars without a field are plain rows."""
    groups: dict[str, list[CategoryBar]] = {}
    for bar in bars:
        groups.setdefault(bar.field, []).append(bar)
    rows: list[_RateRow] = []
    for field, members in groups.items():
        if not field:
            rows += [_RateRow(f"{bar.category} ({bar.problems_total})", bar, False) for bar in members]
            continue
        total = _field_total(field, members)
        rows.append(_RateRow(f"{field} ({total.problems_total})", total, True))
        rows += [_RateRow(f"{bar.category} ({bar.problems_total})", bar, False) for bar in members]
    return rows


def plot_category_rates(bars: Sequence[CategoryBar], path: Path, *, title: str) -> Path:
    """Per field (bold, a group) and per subfield: step pass rate and problem resolve rate as horizontal bars,
    each labelled passed/n; the number of problems beside every name."""
    rows = _rate_rows(bars)
    row_height, top, bottom = 0.42, 1.2, 0.7
    height = max(3.6, top + bottom + row_height * max(len(rows), 1))
    figure = _figure(9.0, height)
    _set_margins(figure, left=3.0, right=0.3, top=top, bottom=bottom)
    axes = figure.add_subplot(1, 1, 1)
    thickness = 0.38
    positions = list(range(len(rows)))
    step_rates = [r.bar.steps_passed / r.bar.steps_scored if r.bar.steps_scored else 0.0 for r in rows]
    problem_rates = [r.bar.problems_resolved / r.bar.problems_total if r.bar.problems_total else 0.0 for r in rows]
    step_bars = axes.barh(
        [p - thickness / 2 for p in positions],
        step_rates,
        thickness,
        color="#0072B2",
        label="steps passed (subproblem)",
    )
    problem_bars = axes.barh(
        [p + thickness / 2 for p in positions],
        problem_rates,
        thickness,
        color="#E69F00",
        label="problems resolved (main problem)",
    )
    axes.bar_label(
        step_bars,
        labels=[_percent(r.bar.steps_passed, r.bar.steps_scored) for r in rows],
        padding=3,
        fontsize=FONT_SIZE - 2,
    )
    axes.bar_label(
        problem_bars,
        labels=[_percent(r.bar.problems_resolved, r.bar.problems_total) for r in rows],
        padding=3,
        fontsize=FONT_SIZE - 2,
    )
    axes.set_yticks(positions, [r.label if r.heading else f"    {r.label}" for r in rows], fontsize=FONT_SIZE)
    for label, row in zip(axes.get_yticklabels(), rows):
        label.set_fontweight("bold" if row.heading else "normal")
    for index, row in enumerate(rows):
        if row.heading and index:
            axes.axhline(index - 0.5, color="#808080", linewidth=0.8)
    axes.set_ylim(max(len(rows), 1) - 0.5, -0.5)
    axes.set_xlim(0, 1.35)
    axes.set_xticks([0, 0.25, 0.5, 0.75, 1.0], ["0%", "25%", "50%", "75%", "100%"], fontsize=FONT_SIZE)
    axes.set_xlabel("pass rate", fontsize=FONT_SIZE)
    axes.set_ylabel(
        "field (bold) and subfield (problems)" if any(r.heading for r in rows) else "category (problems)",
        fontsize=FONT_SIZE,
    )
    axes.spines[["top", "right"]].set_visible(False)
    figure.legend(
        handles=[step_bars, problem_bars],
        loc="upper center",
        ncol=2,
        fontsize=FONT_SIZE - 1,
        frameon=False,
        bbox_to_anchor=(0.5, 1 - 0.72 / height),
    )
    figure.suptitle(_title_text(figure, title), fontsize=TITLE_SIZE, y=1 - 0.08 / height, va="top")
    return _save_png(figure, path)


def write_plots(
    plots_dir: Path,
    *,
    grid_rows: Sequence[GridRow],
    status_counts: Mapping[str, int],
    categories: Sequence[CategoryBar],
    run_label: str,
) -> tuple[Path, ...]:
    """The three plots of a run, written into `plots_dir`; returns their paths."""
    scored = sum(row.scored for row in grid_rows)
    passed = sum(row.passed for row in grid_rows)
    return (
        plot_step_grid(
            grid_rows,
            Path(plots_dir) / STEP_GRID_FILE,
            title=f"{run_label}\nstep status per problem: {_percent(passed, scored)} steps passed",
        ),
        plot_status_counts(
            status_counts,
            Path(plots_dir) / STATUS_COUNTS_FILE,
            title=f"{run_label}\nstep verdicts: {scored} scored, {status_counts.get('skipped', 0)} skipped",
        ),
        plot_category_rates(
            categories, Path(plots_dir) / CATEGORY_RATES_FILE, title=f"{run_label}\npass rate by field and subfield"
        ),
    )
