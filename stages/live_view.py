"""The live view of a run: one status of the problem stages, as a tqdm bar on a terminal or as plain lines.

    generated 7/15, scored 4/15, steps passed 12/14 (85.7%), model calls 4, test processes 2, elapsed 00:41, ETA 00:35
    generated 0/15 (15 failed), scored 15/15, steps passed 0/50 (0.0%), ...

A stage's count is of its problems finished without failure; failures (a task that failed, or a generation that
ended in error) are counted beside it, so a run whose every model call failed never reads "generated 15/15".

`LiveStatus` is what is shown (built by the reporter from doit's task events and `stages.activity`);
`LiveView` shows it. On a terminal one tqdm bar (problems finished over problems of the run, both
stages counted) stays under the lines the run prints and is redrawn at every update. Elsewhere (CI, a
log file) a plain `progress: ...` line is written when the counts changed and `plain_interval_s` passed
since the last one, or after `heartbeat_s` without change: a line every few seconds, never a flood.
Either way the last status stays as one `progress: ...` line when the view closes: once every task of
the shown stages has finished (the bar is removed, so the summary prints on a clean line), and at the
end of the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from tqdm import tqdm

from stages.activity import ActivitySnapshot

PLAIN_PREFIX = "progress: "
BAR_FORMAT = "|{bar:20}| {desc}"


def format_elapsed(seconds: float) -> str:
    """`00:41`, `12:05`, or `1:02:03` past an hour."""
    whole = max(int(seconds), 0)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


@dataclass(frozen=True)
class StageCount:
    """Tasks of one problem stage: finished (any outcome), executed (done or failed), the run's total, and how many
    of the finished ones failed."""

    finished: int
    executed: int
    total: int
    failed: int = 0

    def text(self, verb: str) -> str:
        failed = f" ({self.failed} failed)" if self.failed else ""
        return f"{verb} {max(self.finished - self.failed, 0)}/{self.total}{failed}"


def estimate_eta(stages: tuple[StageCount, ...], working_seconds: float) -> float | None:
    """Seconds left at the rate tasks were executed so far (up-to-date tasks take no time and are not counted
    in the rate); None before any task was executed."""
    executed = sum(stage.executed for stage in stages)
    left = sum(max(stage.total - stage.finished, 0) for stage in stages)
    if left == 0:
        return 0.0
    if executed == 0 or working_seconds <= 0:
        return None
    return left * working_seconds / executed


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
    def counts(self) -> tuple[int, ...]:
        """What a plain line reports as progress (gauges and times move all the time)."""
        return tuple(stage.finished for stage in self.stages) + (self.activity.steps_passed, self.activity.steps_scored)

    def text(self) -> str:
        parts = []
        if self.generated is not None:
            parts.append(self.generated.text("generated"))
        if self.scored is not None:
            parts.append(self.scored.text("scored"))
            rate = self.activity.pass_rate
            share = f" ({rate:.1%})" if rate is not None else ""
            parts.append(f"steps passed {self.activity.steps_passed}/{self.activity.steps_scored}{share}")
        if self.generated is not None:
            parts.append(f"model calls {self.activity.model_calls}")
        if self.scored is not None:
            parts.append(f"test processes {self.activity.test_processes}")
        parts.append(f"elapsed {format_elapsed(self.elapsed_s)}")
        parts.append(f"ETA {format_elapsed(self.eta_s) if self.eta_s is not None else '--:--'}")
        return ", ".join(parts)


class LiveView:
    """Shows `LiveStatus` updates on `stream`: a tqdm bar when `interactive`, plain lines otherwise.

    Not thread-safe by itself: the reporter calls it under its own lock."""

    plain_interval_s: float = 5.0
    heartbeat_s: float = 30.0

    def __init__(self, stream: TextIO, clock: Callable[[], float], interactive: bool) -> None:
        self._stream = stream
        self._clock = clock
        self.interactive = interactive
        self._bar: tqdm | None = None
        self._printed_counts: tuple[int, ...] | None = None
        self._printed_at = float("-inf")

    def update(self, status: LiveStatus) -> None:
        if not status.stages:
            return
        if status.finished:  # what follows (the summary) prints on a clean line, under the final status
            self.close(status)
        elif self.interactive:
            self._draw(status)
        elif self._plain_line_due(status):
            self.write_plain(status)

    def close(self, status: LiveStatus) -> None:
        """Remove the bar, and keep the last status as a line (unless that line was just written)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if status.stages and status.counts != self._printed_counts:
            self.write_plain(status)

    # ---- terminal -------------------------------------------------------
    def _draw(self, status: LiveStatus) -> None:
        total = sum(stage.total for stage in status.stages)
        if self._bar is None:
            self._bar = tqdm(
                total=total,
                desc=status.text(),
                file=self._stream,
                bar_format=BAR_FORMAT,
                dynamic_ncols=True,
                leave=False,
                mininterval=0,
            )
        self._bar.total = total
        self._bar.n = sum(stage.finished for stage in status.stages)
        self._bar.set_description_str(status.text(), refresh=False)
        self._bar.refresh()

    # ---- plain ----------------------------------------------------------
    def _plain_line_due(self, status: LiveStatus) -> bool:
        since = self._clock() - self._printed_at
        changed = status.counts != self._printed_counts
        return since >= self.heartbeat_s or (changed and since >= self.plain_interval_s)

    def write_plain(self, status: LiveStatus) -> None:
        tqdm.write(PLAIN_PREFIX + status.text(), file=self._stream)
        self._stream.flush()
        self._printed_counts, self._printed_at = status.counts, self._clock()
