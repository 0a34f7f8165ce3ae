"""The live view of a run: one status of the problem stages, as a tqdm bar on a terminal or as plain lines.

    generated 7/15, scored 4/15, steps passed 12/14 (85.7%), steps generated 30/50, model calls 4, ...
    generated 0/15 (15 failed), scored 15/15, steps passed 0/50 (0.0%), steps generated 0/50, ...

On a terminal the line is fitted to its width (`stages.progress.live_line`): in 80 columns

    gen 7/15, scored 4/15, passed 12/14 (85.7%), elapsed 00:41, ETA 00:35

(the gauges give way first, then the bar shrinks and goes, then the pass rate; elapsed and ETA stay).
The ETA is computed per phase: each stage's problems left at the rate that stage executed its own tasks since
its first one started (up-to-date tasks take no time and are not counted); generation counts in steps instead,
once a step was asked in this run (its steps left at the rate steps were asked), so a run of a few long problems
has an ETA before its first problem ends. The run's ETA is the longest of them, unknown until every stage with
work left has finished a task (generation: a step).

A stage's count is of its problems finished without failure; failures (a task that failed, or a generation that
ended in error) are counted beside it, so a run whose every model call failed never reads "generated 15/15".

`LiveStatus` is what is shown (built by `stages.progress.run` from doit's task events and `stages.progress.activity`);
`LiveView` shows it. On a terminal one tqdm bar (problems finished over problems of the run, both
stages counted) stays under the lines the run prints and is redrawn at every update. Elsewhere (CI, a
log file) nothing is redrawn (no `\r`): a plain `progress: ...` line is written when the counts changed and
`LinePace.interval_s` passed since the last one, or after `LinePace.heartbeat_s` without change: a line every
few seconds, never a flood.
Either way the last status stays as one `progress: ...` line when the view closes: once every task of
the shown stages has finished (the bar is removed, so the summary prints on a clean line), and at the
end of the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from tqdm import tqdm

from stages.progress.activity import ActivitySnapshot
from stages.progress.live_line import Field, FittedLine, columns_of, fit_line, plain_text

PLAIN_PREFIX = "progress: "
# Drop ranks of the live line's fields (stages.progress.live_line: the bar shrinks at 30 and goes at 40).
DROP_TEST_PROCESSES = 10
DROP_MODEL_CALLS = 20
DROP_PASS_RATE = 50
DROP_STEPS_GENERATED = 55
DROP_STEPS_PASSED = 60


def format_elapsed(seconds: float) -> str:
    """`00:41`, `12:05`, or `1:02:03` past an hour."""
    whole = max(int(seconds), 0)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


@dataclass(frozen=True)
class StepCount:
    """Steps of the run's generation: answered so far (asked now or found), of the run's total, and asked now."""

    answered: int
    total: int
    asked: int

    @property
    def left(self) -> int:
        return max(self.total - self.answered, 0)


@dataclass(frozen=True)
class StageCount:
    """Tasks of one problem stage: finished (any outcome), executed (done or failed), the run's total, and how many
    of the finished ones failed."""

    finished: int
    executed: int
    total: int
    failed: int = 0
    working_s: float = 0.0  # seconds since the stage's first executed task started
    steps: StepCount | None = None  # generation: its steps, which set the ETA once one was asked

    def text(self, verb: str) -> str:
        failed = f" ({self.failed} failed)" if self.failed else ""
        return f"{verb} {max(self.finished - self.failed, 0)}/{self.total}{failed}"

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the rate this stage executed its tasks so far; None before it executed one."""
        left = max(self.total - self.finished, 0)
        if left == 0:
            return 0.0
        if self.steps is not None and self.steps.asked and self.working_s > 0:
            return self.steps.left * self.working_s / self.steps.asked
        if self.executed == 0 or self.working_s <= 0:
            return None
        return left * self.working_s / self.executed


def estimate_eta(stages: tuple[StageCount, ...]) -> float | None:
    """The run's ETA: the longest of its stages' own ETAs (the stages run at the same time, scoring streaming
    behind generation); None while a stage with work left has not executed a task yet."""
    etas = [stage.eta_s for stage in stages]
    if any(eta is None for eta in etas):
        return None
    return max((eta for eta in etas if eta is not None), default=0.0)


@dataclass(frozen=True)
class LiveStatus:
    generated: StageCount | None  # None when the run has no generation task
    scored: StageCount | None  # None when the run has no scoring task
    activity: ActivitySnapshot
    elapsed_s: float
    eta_s: float | None

    @property
    def stages(self) -> tuple[StageCount, ...]:
        return tuple(stage for stage in (self.generated, self.scored) if stage is not None)

    @property
    def finished(self) -> bool:
        """Every task of the shown stages has finished."""
        return all(stage.finished >= stage.total for stage in self.stages)

    @property
    def total(self) -> int:
        return sum(stage.total for stage in self.stages)

    @property
    def counts(self) -> tuple[int, ...]:
        """What a plain line reports as progress (gauges and times move all the time)."""
        return tuple(stage.finished for stage in self.stages) + (self.activity.steps_passed, self.activity.steps_scored)

    def fields(self) -> list[Field]:
        """The line's fields, each with its short label and the rank at which it gives way (see stages.progress.live_line)."""
        fields = []
        if self.generated is not None:
            text = self.generated.text("generated")
            fields.append(Field(text, "gen" + text.removeprefix("generated")))
        if self.scored is not None:
            fields.append(Field(self.scored.text("scored")))
            fields.append(self._steps_passed())
        steps = self.generated.steps if self.generated is not None else None
        if steps is not None and steps.total:
            counts = f"{steps.answered}/{steps.total}"
            fields.append(Field(f"steps generated {counts}", f"steps {counts}", DROP_STEPS_GENERATED))
        if self.generated is not None:
            calls = self.activity.model_calls
            fields.append(Field(f"model calls {calls}", f"calls {calls}", DROP_MODEL_CALLS))
        if self.scored is not None:
            processes = self.activity.test_processes
            fields.append(Field(f"test processes {processes}", f"tests {processes}", DROP_TEST_PROCESSES))
        fields.append(Field(f"elapsed {format_elapsed(self.elapsed_s)}"))
        fields.append(Field(f"ETA {format_elapsed(self.eta_s) if self.eta_s is not None else '--:--'}"))
        return fields

    def _steps_passed(self) -> Field:
        counts = f"{self.activity.steps_passed}/{self.activity.steps_scored}"
        without_rate = Field(f"steps passed {counts}", f"passed {counts}", DROP_STEPS_PASSED)
        rate = self.activity.pass_rate
        if rate is None:
            return without_rate
        share = f" ({rate:.1%})"
        return Field(f"steps passed {counts}{share}", f"passed {counts}{share}", DROP_PASS_RATE, without_rate)

    def text(self) -> str:
        """The whole status, long labels, as a plain line shows it."""
        return plain_text(self.fields())

    def fitted(self, columns: int) -> FittedLine:
        """The status as the terminal's live line shows it in `columns`."""
        return fit_line(self.fields(), columns)


class LiveView:
    """Shows `LiveStatus` updates on `stream`: a tqdm bar when `interactive`, plain lines otherwise.

    Not thread-safe by itself: `RunProgress` calls it under its own lock."""

    def __init__(
        self,
        stream: TextIO,
        clock: Callable[[], float],
        interactive: bool,
        columns: Callable[[], int] | None = None,
    ) -> None:
        self._stream = stream
        self._clock = clock
        self.interactive = interactive
        self._columns = columns if columns is not None else lambda: columns_of(stream)
        self._bar = LiveBar(stream)
        self._pace = LinePace(clock)

    def update(self, status: LiveStatus) -> None:
        if not status.stages:
            return
        if status.finished:  # what follows (the summary) prints on a clean line, under the final status
            self.close(status)
        elif self.interactive:
            self._draw(status)
        elif self._pace.due(status.counts):
            self.write_plain(status)

    def close(self, status: LiveStatus) -> None:
        """Remove the bar, and keep the last status as a line (unless that line was just written)."""
        self._bar.close()
        if status.stages and status.counts != self._pace.printed_counts:
            self.write_plain(status)

    # ---- terminal -------------------------------------------------------
    def _draw(self, status: LiveStatus) -> None:
        self._bar.draw(status.fitted(self._columns()), sum(stage.finished for stage in status.stages), status.total)

    @property
    def bar_shown(self) -> bool:
        return self._bar.shown

    # ---- plain ----------------------------------------------------------
    def write_plain(self, status: LiveStatus) -> None:
        write_plain_line(self._stream, status.text())
        self._pace.printed(status.counts)


def write_plain_line(stream: TextIO, text: str) -> None:
    """One whole `progress: ...` line (above any bar on the stream)."""
    tqdm.write(PLAIN_PREFIX + text, file=stream)
    stream.flush()


class LinePace:
    """When a plain progress line is due: when the counts changed and `interval_s` passed since the last line,
    or after `heartbeat_s` whatever changed. A line every few seconds at most, never a flood."""

    interval_s: float = 5.0
    heartbeat_s: float = 30.0

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.printed_counts: tuple[int, ...] | None = None
        self._printed_at = float("-inf")

    def due(self, counts: tuple[int, ...]) -> bool:
        since = self._clock() - self._printed_at
        return since >= self.heartbeat_s or (counts != self.printed_counts and since >= self.interval_s)

    def printed(self, counts: tuple[int, ...]) -> None:
        self.printed_counts, self._printed_at = counts, self._clock()


def bar_format(line: FittedLine) -> str:
    """tqdm's format for a fitted line (the description holds the fields' text)."""
    return f"|{{bar:{line.bar_width}}}| {{desc}}" if line.bar_width else "{desc}"


class LiveBar:
    """One tqdm bar redrawn in place on `stream` as a fitted line: the layout and width are ours, never tqdm's."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._bar: tqdm | None = None

    @property
    def shown(self) -> bool:
        return self._bar is not None

    def draw(self, line: FittedLine, done: int, total: int) -> None:
        if self._bar is None:
            self._bar = tqdm(
                total=total,
                initial=done,
                desc=line.text,
                file=self._stream,
                bar_format=bar_format(line),
                dynamic_ncols=False,
                ncols=line.width,
                leave=False,
                mininterval=0,
            )
        bar = self._bar
        bar.total = total
        bar.n = done
        bar.bar_format = bar_format(line)
        bar.ncols = line.width
        bar.set_description_str(line.text, refresh=False)
        bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
