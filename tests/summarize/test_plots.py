"""Plots: valid PNGs of the expected size, byte-identical across runs, sized to the number of problems."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
from PIL import Image

from stages.summarize.plots import (
    CATEGORY_RATES_FILE,
    DPI,
    STATE_COLORS,
    STATUS_COUNTS_FILE,
    STEP_GRID_FILE,
    CategoryBar,
    GridRow,
    plot_step_grid,
    write_plots,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
STATUSES = ("pass", "fail", "timeout", "parse_error", "eval_error", "skipped", "no_verdict")


def grid_rows(count: int, groups: tuple[str, ...] = ("validation", "test")) -> list[GridRow]:
    rows = []
    for index in range(count):
        steps = 1 + index % 9
        statuses = tuple(STATUSES[(index + col) % len(STATUSES)] for col in range(steps))
        passed = statuses.count("pass")
        scored = steps - statuses.count("skipped")
        rows.append(
            GridRow(
                str(index + 1),
                statuses,
                passed,
                scored,
                failed=index % 7 == 0,
                group=groups[0] if index < count // 4 else groups[-1],
            )
        )
    return rows


def sample_plots(folder: Path, problems: int = 15) -> tuple[Path, ...]:
    counts = {"pass": 40, "fail": 5, "timeout": 2, "parse_error": 1, "eval_error": 2, "skipped": 3, "no_verdict": 0}
    categories = [CategoryBar("unclassified", 40, 50, 9, 15), CategoryBar("physics", 3, 8, 0, 2)]
    return write_plots(
        folder,
        grid_rows=grid_rows(problems),
        status_counts=counts,
        categories=categories,
        run_label="gold / validation-tool_use-bg",
    )


def test_three_valid_pngs_are_written(tmp_path: Path) -> None:
    paths = sample_plots(tmp_path / "plots")
    assert [path.name for path in paths] == [STEP_GRID_FILE, STATUS_COUNTS_FILE, CATEGORY_RATES_FILE]
    for path in paths:
        assert path.read_bytes()[:8] == PNG_SIGNATURE
        with Image.open(path) as image:
            image.verify()
        with Image.open(path) as image:
            width, height = image.size
            assert image.format == "PNG" and width >= 600 and height >= 300
            assert "Software" not in image.info  # no tool/version text in the file
        pixels = matplotlib.image.imread(path)
        assert pixels.shape[0] == height and pixels.shape[1] == width
        assert os.stat(path).st_mode & 0o044 == 0o044, "plots are readable by others"
    assert not list((tmp_path / "plots").glob(".*.tmp")), "no temp files left behind"


def test_plots_are_byte_identical_for_identical_inputs(tmp_path: Path) -> None:
    first = sample_plots(tmp_path / "a")
    second = sample_plots(tmp_path / "b")
    for one, two in zip(first, second):
        assert one.read_bytes() == two.read_bytes(), one.name


def test_grid_height_grows_with_the_number_of_problems(tmp_path: Path) -> None:
    small = plot_step_grid(grid_rows(15), tmp_path / "small.png", title="15 problems")
    large = plot_step_grid(grid_rows(80), tmp_path / "large.png", title="80 problems")
    with Image.open(small) as a, Image.open(large) as b:
        assert b.size[1] - a.size[1] == pytest.approx(65 * 0.24 * DPI, abs=2)
        assert b.size[1] >= 80 * 0.24 * DPI  # at least 24 px per problem row


def test_grid_cells_carry_the_status_colours(tmp_path: Path) -> None:
    rows = [GridRow("1", ("pass", "fail"), 1, 2, failed=False), GridRow("2", ("timeout",), 0, 1, failed=True)]
    path = plot_step_grid(rows, tmp_path / "grid.png", title="two problems")
    pixels = (matplotlib.image.imread(path)[:, :, :3] * 255).round().astype(int)
    colours = {tuple(pixel) for pixel in pixels.reshape(-1, 3)}

    def rgb(hex_colour: str) -> tuple[int, int, int]:
        return int(hex_colour[1:3], 16), int(hex_colour[3:5], 16), int(hex_colour[5:7], 16)

    for state in ("pass", "fail", "timeout"):
        assert rgb(STATE_COLORS[state]) in colours, state
    assert rgb(STATE_COLORS["eval_error"]) in colours  # legend swatch: all six statuses are in the legend
    assert np.count_nonzero(np.all(pixels == rgb(STATE_COLORS["pass"]), axis=-1)) > 400  # a cell, not a swatch
