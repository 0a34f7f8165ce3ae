"""The progress of one phase that runs outside the problem stages' live view (target derivation).

    derive targets 12/40 steps (1 failed), running 2, elapsed 00:41, ETA 01:10

On a terminal one bar, fitted to its width (`stages.progress.live_line`), redrawn in place; elsewhere (CI, a log file) no
`\\r` at all: a `progress: ...` line when the counts changed and a few seconds passed since the last one, or after
a longer heartbeat (`stages.progress.live_view.LinePace`), and the last status as one line when the phase ends.

The ETA is the phase's own: each unit's expected duration (measured before, else a default), scaled by how long
the finished units took against their expectation, is the work left (the running units' expected remainder
included); spread over the workers, and never less than the longest running unit still needs. So a phase that
starts with its longest units (as target derivation does) does not promise the end early, nor does its ETA
simply follow the elapsed time.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TextIO

from stages.progress.live_line import Field, columns_of, fit_line, plain_text
from stages.progress.live_view import LinePace, LiveBar, format_elapsed, write_plain_line

DROP_RUNNING = 10
DEFAULT_UNIT_SECONDS = 1.0


@dataclass(frozen=True)
class Running:
    expected_s: float
    elapsed_s: float


def phase_eta(
    waiting_expected_s: float,
    running: list[Running],
    finished_expected_s: float,
    finished_actual_s: float,
    workers: int,
) -> float:
    """Seconds left (see the module docstring): expected work scaled by the pace of the finished units."""
    pace = finished_actual_s / finished_expected_s if finished_expected_s > 0 and finished_actual_s > 0 else 1.0
    running_left = [max(unit.expected_s * pace - unit.elapsed_s, 0.0) for unit in running]
    work_left = waiting_expected_s * pace + sum(running_left)
    return max(work_left / max(workers, 1), max(running_left, default=0.0))


class PhaseProgress:
    """Counts units of one phase as they start and finish, and shows them (thread-safe)."""

    def __init__(
        self,
        name: str,
        unit: str,
        expected_s: Mapping[str, float],
        workers: int,
        *,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        interactive: bool | None = None,
        columns: Callable[[], int] | None = None,
    ) -> None:
        self._name, self._unit = name, unit
        self._expected = dict(expected_s)
        self._workers = workers
        self._stream = stream if stream is not None else sys.stderr
        self._clock = clock
        self._started_at = clock()
        if interactive is None:
            isatty = getattr(self._stream, "isatty", None)
            interactive = bool(isatty and isatty())
        self.interactive = interactive
        self._columns = columns if columns is not None else lambda: columns_of(self._stream)
        self._lock = threading.Lock()
        self._waiting = set(self._expected)
        self._running: dict[str, float] = {}
        self._finished_expected = self._finished_actual = 0.0
        self._done = self._failed = 0
        self._bar = LiveBar(self._stream)
        self._pace = LinePace(clock)

    def _expected_of(self, unit_id: str) -> float:
        return self._expected.get(unit_id, DEFAULT_UNIT_SECONDS)

    # ---- events ---------------------------------------------------------
    def started(self, unit_id: str) -> None:
        with self._lock:
            self._waiting.discard(unit_id)
            self._running[unit_id] = self._clock()

    def finished(self, unit_id: str, ok: bool, duration_s: float) -> None:
        with self._lock:
            self._waiting.discard(unit_id)
            self._running.pop(unit_id, None)
            self._done += 1
            self._failed += 0 if ok else 1
            self._finished_expected += self._expected_of(unit_id)
            self._finished_actual += max(duration_s, 0.0)
        self.refresh()

    # ---- what is shown --------------------------------------------------
    def eta_s(self) -> float:
        with self._lock:
            now = self._clock()
            running = [Running(self._expected_of(uid), now - since) for uid, since in self._running.items()]
            waiting = sum(self._expected_of(uid) for uid in self._waiting)
            return phase_eta(waiting, running, self._finished_expected, self._finished_actual, self._workers)

    def fields(self) -> list[Field]:
        eta = self.eta_s()
        with self._lock:
            failed = f" ({self._failed} failed)" if self._failed else ""
            counts = f"{self._name} {self._done}/{len(self._expected)} {self._unit}s{failed}"
            running = len(self._running)
            elapsed = self._clock() - self._started_at
        return [
            Field(counts),
            Field(f"running {running}", drop=DROP_RUNNING),
            Field(f"elapsed {format_elapsed(elapsed)}"),
            Field(f"ETA {format_elapsed(eta)}"),
        ]

    def _counts(self) -> tuple[int, ...]:
        with self._lock:
            return (self._done, self._failed)

    def refresh(self) -> None:
        """Redraw the bar, or write a plain line when one is due (a heartbeat when called without news)."""
        try:
            if self.interactive:
                line = fit_line(self.fields(), self._columns())
                with self._lock:
                    done, total = self._done, len(self._expected)
                self._bar.draw(line, done, total)
            elif self._pace.due(self._counts()):
                self._write_plain()
        except (OSError, ValueError):
            pass  # a closed stream loses the view, never the work

    def close(self) -> None:
        """Remove the bar and keep the last status as one line (unless that line was just written)."""
        try:
            self._bar.close()
            if self._counts() != self._pace.printed_counts:
                self._write_plain()
        except (OSError, ValueError):
            pass

    def _write_plain(self) -> None:
        counts = self._counts()
        write_plain_line(self._stream, plain_text(self.fields()))
        self._pace.printed(counts)
