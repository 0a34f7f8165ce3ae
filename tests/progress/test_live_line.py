"""The live line's layout: what a terminal of 80 columns (and wider, and narrower) shows of a run's status, and the
plain lines of a phase outside the problem stages (target derivation) when the output is not a terminal."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from stages.progress.activity import ActivitySnapshot
from stages.progress.live_line import Field, FittedLine, columns_of, fit_line, layouts
from stages.progress.live_view import LiveStatus, StageCount
from stages.progress.phase import PhaseProgress, Running, phase_eta
from tests.support.pipeline_support import data_args, output_of, run_doit


class FakeClock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


class TtyStream(io.StringIO):
    def isatty(self) -> bool:
        return True


def status(
    generated: tuple[int, int, int] = (7, 15, 0),
    scored: tuple[int, int, int] = (4, 15, 0),
    passed: tuple[int, int] = (12, 14),
    gauges: tuple[int, int] = (4, 2),
    elapsed: float = 41.0,
    eta: float | None = 35.0,
) -> LiveStatus:
    """A run's status: (finished, total, failed) per stage, steps (passed, scored), (model calls, test processes)."""
    return LiveStatus(
        StageCount(generated[0], generated[0], generated[1], generated[2]),
        StageCount(scored[0], scored[0], scored[1], scored[2]),
        ActivitySnapshot(generated[1], gauges[0], gauges[1], passed[0], passed[1]),
        elapsed,
        eta,
    )


def drawn(line_width: int, text: str) -> str:
    return ("|" + "#" * line_width + "| " if line_width else "") + text


# ---------------------------------------------------------------------------
# The run's live line
# ---------------------------------------------------------------------------


def test_eighty_columns_keep_the_counts_the_pass_rate_elapsed_and_eta() -> None:
    line = status().fitted(80)
    assert line.width <= 79  # the last column stays free: a redrawn line never wraps
    assert line.text == "gen 7/15, scored 4/15, passed 12/14 (85.7%), elapsed 00:41, ETA 00:35"
    assert line.bar_width == 0  # the gauges gave way first, then the bar (the counts say what it would)
    assert status(gauges=(0, 0), passed=(1, 2)).fitted(90).bar_width == 10


def test_a_wide_terminal_shows_everything_with_long_labels() -> None:
    line = status().fitted(160)
    assert line.bar_width == 20
    assert (
        line.text
        == status().text()
        == (
            "generated 7/15, scored 4/15, steps passed 12/14 (85.7%), model calls 4, test processes 2, "
            "elapsed 00:41, ETA 00:35"
        )
    )


def test_fields_give_way_in_order_of_value_as_the_terminal_narrows() -> None:
    full = status(generated=(80, 80, 80), scored=(80, 80, 80), passed=(0, 338), elapsed=3723, eta=3723)
    widths = (200, 130, 100, 90, 80, 60, 40)
    seen = [full.fitted(columns) for columns in widths]
    assert all(line.width <= columns - 1 for line, columns in zip(seen, widths))
    assert all(line.text.endswith("elapsed 1:02:03, ETA 1:02:03") for line in seen)
    assert [line.text.removesuffix(", elapsed 1:02:03, ETA 1:02:03") for line in seen] == [
        "generated 0/80 (80 failed), scored 0/80 (80 failed), steps passed 0/338 (0.0%), model calls 4, "
        "test processes 2",
        "gen 0/80 (80 failed), scored 0/80 (80 failed), passed 0/338 (0.0%), calls 4",  # test processes went first
        "gen 0/80 (80 failed), scored 0/80 (80 failed), passed 0/338 (0.0%)",  # then model calls, then the bar
        "gen 0/80 (80 failed), scored 0/80 (80 failed), passed 0/338",  # then the pass rate
        "gen 0/80 (80 failed), scored 0/80 (80 failed)",  # then the steps; the counts and failures stay
        "...), scored 0/80 (80 failed)",  # narrower still: the start is cut, the times are not
        "...ailed)",
    ]
    assert [line.bar_width for line in seen] == [20, 20, 0, 0, 0, 0, 0]


def test_every_layout_tried_keeps_elapsed_and_eta_and_a_too_narrow_terminal_cuts() -> None:
    assert all("elapsed 00:41" in line.text and "ETA 00:35" in line.text for line in layouts(status().fields()))
    tiny = status().fitted(30)
    assert tiny == FittedLine(0, "..., elapsed 00:41, ETA 00:35")  # the start gives way, never the times


def test_an_unknown_eta_is_said_as_such() -> None:
    assert status(eta=None).fitted(80).text.endswith("ETA --:--")


@given(
    finished=st.integers(0, 10_000),
    total=st.integers(0, 10_000),
    failed=st.integers(0, 10_000),
    passed=st.integers(0, 100_000),
    gauges=st.integers(0, 10_000),
    elapsed=st.floats(0, 1e7),
    columns=st.integers(1, 400),
)
def test_any_status_fits_any_terminal_and_keeps_the_times_from_sixty_columns(
    finished: int, total: int, failed: int, passed: int, gauges: int, elapsed: float, columns: int
) -> None:
    shown = status((finished, total, failed), (finished, total, failed), (passed, passed), (gauges, gauges), elapsed)
    line = shown.fitted(columns)
    assert line.width <= max(columns - 1, 1)
    if columns >= 60 and max(finished, total, failed) < 1000:
        assert "elapsed " in line.text and "ETA 00:35" in line.text


def test_the_width_of_a_stream_that_is_not_a_terminal_is_columns_else_80(monkeypatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    assert columns_of(io.StringIO()) == 80
    monkeypatch.setenv("COLUMNS", "132")
    assert columns_of(io.StringIO()) == 132


def test_a_field_gives_way_to_its_lesser_form_then_to_nothing() -> None:
    lesser = Field("steps passed 1/2", "passed 1/2", drop=60)  # after the bar (stages.progress.live_line.BAR_SHRINKS)
    field = Field("steps passed 1/2 (50.0%)", "passed 1/2 (50.0%)", drop=50, lesser=lesser)
    kept = Field("ETA 00:01")
    assert [fit_line([field, kept], columns).text for columns in (60, 23, 12)] == [
        "steps passed 1/2 (50.0%), ETA 00:01",
        "passed 1/2, ETA 00:01",
        "ETA 00:01",
    ]


# ---------------------------------------------------------------------------
# A phase outside the live view: target derivation
# ---------------------------------------------------------------------------


def test_the_phase_eta_follows_expected_work_not_elapsed_time() -> None:
    # longest first: the 82 s step runs, the others wait; nothing finished yet
    running = [Running(82.0, 10.0), Running(44.0, 10.0)]
    assert phase_eta(20.0, running, 0.0, 0.0, workers=2) == 72.0  # the long step still needs 72 s
    # steps ran twice as slow as expected: what is left is scaled by that pace
    assert phase_eta(30.0, [], finished_expected_s=10.0, finished_actual_s=20.0, workers=2) == 30.0
    assert phase_eta(0.0, [], 10.0, 10.0, workers=2) == 0.0


def test_off_a_terminal_a_phase_writes_plain_lines_at_a_bounded_rate() -> None:
    clock = FakeClock()
    stream = io.StringIO()
    units = {f"{i}.1": 1.0 for i in range(600)}
    progress = PhaseProgress("derive targets", "step", units, 2, stream=stream, clock=clock, interactive=False)
    for index, unit in enumerate(units):  # 600 steps over 60 s, one every 0.1 s
        progress.started(unit)
        clock.now += 0.1
        progress.finished(unit, ok=index % 100 != 0, duration_s=0.2)
        progress.refresh()
    progress.close()
    text = stream.getvalue()
    lines = text.splitlines()
    assert "\r" not in text
    assert 10 <= len(lines) <= 60 / 5 + 2  # one line per 5 s at most, and the last status
    assert all(
        re.fullmatch(r"progress: derive targets \d+/600 steps.*, elapsed \d\d:\d\d, ETA \d\d:\d\d", line)
        for line in lines
    )
    assert lines[0].startswith("progress: derive targets 1/600 steps (1 failed), running 0, elapsed 00:00")
    assert lines[-1] == "progress: derive targets 600/600 steps (6 failed), running 0, elapsed 01:00, ETA 00:00"


def test_a_quiet_phase_writes_a_heartbeat_and_on_a_terminal_one_bar() -> None:
    clock = FakeClock()
    stream = io.StringIO()
    progress = PhaseProgress("derive targets", "step", {"1.1": 50.0}, 1, stream=stream, clock=clock, interactive=False)
    progress.started("1.1")
    progress.refresh()
    clock.now += 10
    progress.refresh()  # no news, within the heartbeat: nothing
    clock.now += 25
    progress.refresh()
    assert stream.getvalue().splitlines() == [
        "progress: derive targets 0/1 steps, running 1, elapsed 00:00, ETA 00:50",
        "progress: derive targets 0/1 steps, running 1, elapsed 00:35, ETA 00:15",
    ]

    tty = TtyStream()
    bar = PhaseProgress(
        "derive targets", "step", {"1.1": 5.0}, 1, stream=tty, clock=clock, interactive=True, columns=lambda: 40
    )
    bar.started("1.1")
    bar.refresh()
    assert "\r" in tty.getvalue() and "progress: " not in tty.getvalue()
    drawn_lines = [part.rstrip() for part in tty.getvalue().split("\r") if part.strip()]
    assert all(len(part) <= 39 for part in drawn_lines)
    assert drawn_lines[-1].endswith("elapsed 00:00, ETA 00:05")
    bar.finished("1.1", ok=True, duration_s=1.0)
    bar.close()
    assert tty.getvalue().endswith("progress: derive targets 1/1 steps, running 0, elapsed 00:00, ETA 00:00\n")


def test_a_real_derivation_in_a_log_file_has_no_carriage_return(tmp_path: Path, shared_scicode: Path) -> None:
    """`doit targets` with its output in a file (not a terminal): progress lines, never a redrawn bar."""
    data_dir = tmp_path / "data" / "scicode"
    data_dir.mkdir(parents=True)
    for name in ("problems_test.jsonl", "multistep_template.txt", "background_comment_template.txt"):
        shutil.copyfile(shared_scicode / name, data_dir / name)
    with open(shared_scicode / "problems_dev.jsonl", encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle]
    kept = [r for r in records if r["problem_id"] in ("3", "19")]
    (data_dir / "problems_dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    args = (*data_args(tmp_path / "data", None), "verify_checksums=false", "split=validation")
    result = run_doit(tmp_path, "targets", *args, timeout=300)
    assert result.returncode == 0, output_of(result)
    steps = sum(len(r["sub_steps"]) for r in kept)
    assert "\r" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("progress: derive targets")]
    assert lines and lines[-1].startswith(f"progress: derive targets {steps}/{steps} steps, running 0, elapsed ")
    assert lines[-1].endswith("ETA 00:00")
    assert all(len(line) < 120 for line in lines)
