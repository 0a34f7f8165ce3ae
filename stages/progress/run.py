"""The progress of a run, shown by doit's reporter `RunProgress`: one line per stage instead of one per task.

A stage is the part of a task name before ':' (`generate:10` belongs to `generate`). For each stage the
reporter counts tasks reached so far, executed (`done`), up to date and failed, and prints

    generate   12/15 done, 3 up-to-date, 0 failed  [00:41]

at most every `min_interval_s` per stage (and when another stage takes over while it is idle; generate tasks
that finished with a generation error are said beside: "(2 done with a generation error)"), each
failure at once with a one-line reason, and at the end a final line per stage, the failures, and
"nothing to do: everything up to date" when no task ran. A reason is shown once: when fifteen problems
fail the same way (a wrong model name) or fifteen scoring tasks do not run because their generation
failed, the first is shown at once and the end lists each group as one line naming its tasks. The count after `/` is the number of the
stage's tasks doit has reached so far (delayed sub-tasks appear as their creator runs).

doit calls `execute_task` from its worker threads (`par_type: thread`) and the other methods from the
main thread, so every method takes one lock. Lines are written whole through `tqdm.write`, which lifts
any progress bar drawn on the same stream out of the way. The reporter never raises: a display problem
must not change doit's exit code, which stays doit's own (the reporter only watches).

Failures of the pipeline's own error classes (modules under `stages.`, `stages.errors.PipelineError`) are shown as
`ErrorClass: message`; an unexpected exception also gets its traceback at the end of the run (the one-line
reasons and their grouping are `stages.progress.failures`).

During a doit run (from `initialize` to `complete_run`) the problem stages (`LIVE_STAGES`) are shown by
one live view (`stages.progress.live_view`) instead of per-stage lines: problems generated and scored, steps
passed so far with the pass rate, model calls in flight, test processes busy, elapsed time and an ETA.
A ticker thread refreshes it every `tick_s` (a tqdm bar fitted to the terminal's width, a plain line every few
seconds elsewhere); their final per-stage lines still close the run.

Each failed step is printed once, when its verdict is known (the score stage publishes it through
`stages.progress.activity`; the reporter prints what was published at every refresh, at most `tick_s` later):

    step 10.2 timeout: the test process ran past 30 s
    steps 12.1, 12.2, 12.3 fail: not generated: HTTP 500 from the model
    step 10.2@1 fail: test 3 failed: AssertionError
    steps 13.1, 13.2 fail: same reason as step 12.1

(`@k`: attempt k, when several are scored; the reason is model-derived text, shown on one line, neutralised;
a reason printed before is not repeated, so fifteen problems left unanswered by one outage read short.)
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TextIO, TypeVar

from doit.exceptions import BaseFail, UnmetDependency
from doit.reporter import ConsoleReporter
from tqdm import tqdm

from stages.errors import pipeline_error_names
from stages.execution import live_processes
from stages.execution.untrusted import shown
from stages.progress.activity import ACTIVITY, Activity, ActivitySnapshot
from stages.progress.failures import (
    FailureNote,
    describe_failure,
    first_line,
    group_failures,
    stage_of,
    step_failure_line,
    step_labels,
)
from stages.progress.live_view import LiveStatus, LiveView, StageCount, StepCount, estimate_eta, format_elapsed

TaskOutcome = Literal["done", "up-to-date", "failed", "ignored"]
GROUP_NAMES_SHOWN = 8
MIN_STAGE_WIDTH = len("summarize")
LIVE_STAGES = ("generate", "score")
# A stage reached without being asked for on the command line runs for the stage named here.
FOLLOWED_BY = {"generate": "score"}

F = TypeVar("F", bound=Callable[..., Any])


EXPLANATION_TASKS: frozenset[str] = frozenset({"explain"})  # commands whose output is their explanations alone


# ---------------------------------------------------------------------------
# Per-stage tallies
# ---------------------------------------------------------------------------


@dataclass
class StageTally:
    name: str
    started: float
    seen: set[str] = field(default_factory=set)
    running: set[str] = field(default_factory=set)
    done: int = 0
    up_to_date: int = 0
    failed: int = 0
    ignored: int = 0
    last_event: float = 0.0
    printed_state: tuple[int, ...] | None = None
    printed_at: float = float("-inf")

    @property
    def state(self) -> tuple[int, ...]:
        return (len(self.seen), self.done, self.up_to_date, self.failed, self.ignored)

    @property
    def finished(self) -> int:
        return self.done + self.up_to_date + self.failed + self.ignored

    @property
    def changed(self) -> bool:
        return self.state != self.printed_state

    def line(self, width: int, now: float, generation_errors: int = 0) -> str:
        """The stage's line; `generation_errors`: done tasks whose generation ended in error (said beside)."""
        end = now if self.running else self.last_event
        text = (
            f"{self.name:<{width}}  {self.done}/{len(self.seen)} done, {self.up_to_date} up-to-date, "
            f"{self.failed} failed"
        )
        if generation_errors:
            text += f" ({generation_errors} done with a generation error)"
        if self.ignored:
            text += f", {self.ignored} ignored"
        if self.running:
            text += f", {len(self.running)} running"
        return f"{text}  [{format_elapsed(end - self.started)}]"


def _has_actions(task: Any) -> bool:
    """Whether a doit task has actions, without building them (doit builds them lazily and may raise
    InvalidTask while doing so; that error is doit's to report, at the time doit chooses)."""
    declared = getattr(task, "_actions", None)
    if declared is not None:
        return bool(declared)
    try:
        return bool(task.actions)
    except Exception:
        return True


def _never_raises(method: F) -> F:
    """Reporter methods must not break the run: an internal error becomes one line on the stream."""

    @functools.wraps(method)
    def guarded(self: RunProgress, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception as error:  # display only; doit's result and exit code are unaffected
            try:
                self._emit(f"progress reporter: {type(error).__name__}: {error}")
            except Exception:
                pass
            return None

    return guarded  # type: ignore[return-value]


def generation_steps(snapshot: ActivitySnapshot) -> StepCount | None:
    """The generation's steps, once the run knows how many it is to answer."""
    if not snapshot.steps_to_generate:
        return None
    return StepCount(snapshot.steps_generated, snapshot.steps_to_generate, snapshot.steps_asked)


class RunProgress(ConsoleReporter):  # type: ignore[misc]  # doit ships no types: ConsoleReporter is Any
    """doit reporter printing one compact progress line per stage; see the module docstring."""

    desc = "one progress line per stage, failures with a one-line reason"
    min_interval_s: float = 5.0
    tick_s: float = 1.0

    def __init__(
        self,
        outstream: TextIO,
        options: dict[str, object],  # doit's, handed on to its reporter
        *,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        activity: Activity = ACTIVITY,
        interactive: bool | None = None,
        columns: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(outstream, options)
        self._stream = stream if stream is not None else sys.stderr
        self._clock = clock
        self._started = clock()
        self._lock = threading.RLock()
        self._stages: dict[str, StageTally] = {}
        self._notes: list[FailureNote] = []
        self._cleanup_errors: list[str] = []
        self._shown_failures: set[tuple[str, str]] = set()
        self._step_reasons: dict[tuple[str, str], str] = {}  # (status, reason) -> the step first printed with it
        self._activity = activity
        self._interactive = interactive
        self._selected: tuple[str, ...] = ()
        self._live: LiveView | None = None
        self._columns = columns
        self._first_work: dict[str, float] = {}  # per live stage: when its first executed task started
        self._stop_ticker = threading.Event()

    # ---- output ---------------------------------------------------------
    def _emit(self, line: str) -> None:
        """Write one whole line; a closed or failing stream loses the line, never the counts. Silent once the run
        is being stopped (Ctrl-C / SIGTERM): the stop says it in one line of its own. Failure reasons and
        tracebacks can hold model-derived text: every line is written as `untrusted.shown` (its line breaks
        kept) makes it, so no escape sequence reaches the terminal."""
        if live_processes.stopping():
            return
        with self._lock:
            try:
                tqdm.write(shown(line, lines=True), file=self._stream)
                self._stream.flush()
            except (OSError, ValueError):
                pass

    def _width(self) -> int:
        return max([MIN_STAGE_WIDTH] + [len(name) for name in self._stages])

    def _print_stage(self, tally: StageTally, now: float) -> None:
        self._emit(self._stage_line(tally, now))
        tally.printed_state, tally.printed_at = tally.state, now

    def _stage_line(self, tally: StageTally, now: float) -> str:
        errors = self._activity.snapshot().generations_failed if tally.name == "generate" else 0
        return tally.line(self._width(), now, errors)

    def _show_progress(self, stage: str) -> None:
        """After a finished task: the stage's line when due, and other idle stages' lines not yet shown
        (the live view instead, for the stages it shows)."""
        now = self._clock()
        for other in self._stages.values():
            if (
                other.name != stage
                and other.changed
                and not other.running
                and other.finished
                and not self._shown_live(other.name)
            ):
                self._print_stage(other, now)
        if self._shown_live(stage):
            self._refresh_live()
            return
        tally = self._stages[stage]
        if tally.changed and now - tally.printed_at >= self.min_interval_s:
            self._print_stage(tally, now)

    # ---- live view ------------------------------------------------------
    def _shown_live(self, stage: str) -> bool:
        return self._live is not None and stage in LIVE_STAGES

    def _planned_total(self, stage: str, reached: int, problems: int) -> int:
        """The stage's tasks in this run: the sub-tasks named on the command line, else every problem."""
        named = [name for name in self._selected if stage_of(name) == stage and name != stage]
        planned = len(named) if named and stage not in self._selected else problems
        return max(planned, reached)

    def _expected_live_stages(self) -> list[str]:
        """Live stages reached so far, and those that follow a stage reached without being asked for."""
        expected = [name for name in LIVE_STAGES if name in self._stages]
        for stage, following in FOLLOWED_BY.items():
            asked = any(stage_of(name) == stage for name in self._selected)
            if stage in self._stages and not asked and following not in expected:
                expected.append(following)
        return expected

    def live_status(self) -> LiveStatus:
        """What the live view shows now (a snapshot)."""
        with self._lock:
            now = self._clock()
            snapshot = self._activity.snapshot()
            names = self._expected_live_stages()
            tallies = {name: self._stages.get(name) or StageTally(name, started=now) for name in names}
            problems = snapshot.problems or max([len(tally.seen) for tally in tallies.values()], default=0)
            counts = {
                name: StageCount(
                    tally.finished,
                    tally.done + tally.failed,
                    self._planned_total(name, len(tally.seen), problems),
                    tally.failed + (snapshot.generations_failed if name == "generate" else 0),
                    now - self._first_work[name] if name in self._first_work else 0.0,
                    generation_steps(snapshot) if name == "generate" else None,
                )
                for name, tally in tallies.items()
            }
            return LiveStatus(
                counts.get("generate"),
                counts.get("score"),
                snapshot,
                now - self._started,
                estimate_eta(tuple(counts.values())),
            )

    def _print_step_failures(self) -> None:
        """The failed steps published since the last call, one line each, above the live view."""
        failures, unkept = self._activity.take_step_failures()
        for failure in failures:
            key = (failure.status, failure.reason)
            self._emit(step_failure_line(failure, self._step_reasons.get(key)))
            self._step_reasons.setdefault(key, step_labels(failure)[0])
        if unkept:
            self._emit(f"{unkept} more failed step(s) not printed (see the details files)")

    def _refresh_live(self) -> None:
        with self._lock:
            self._print_step_failures()
            if self._live is not None:
                try:
                    self._live.update(self.live_status())
                except (OSError, ValueError):
                    pass  # a closed stream loses the view, never the counts

    def _tick(self) -> None:
        """Refresh the view every `tick_s` until the run completes; a display error stops the ticker, not the run."""
        try:
            while not self._stop_ticker.wait(self.tick_s):
                self._refresh_live()
        except Exception as error:  # display only
            self._emit(f"progress reporter: live view stopped: {type(error).__name__}: {error}")

    def _start_live_view(self) -> None:
        interactive = self._interactive
        if interactive is None:
            isatty = getattr(self._stream, "isatty", None)
            interactive = bool(isatty and isatty())
        self._live = LiveView(self._stream, self._clock, interactive, self._columns)
        threading.Thread(target=self._tick, name="live-view", daemon=True).start()

    def _close_live_view(self) -> None:
        self._stop_ticker.set()
        if self._live is not None:
            try:
                self._live.close(self.live_status())
            except (OSError, ValueError):
                pass

    # ---- bookkeeping ----------------------------------------------------
    @staticmethod
    def _counted(task: Any) -> bool:
        """A task with actions and a public name (group tasks and `_private` tasks are not counted)."""
        return _has_actions(task) and not task.name.startswith("_")

    def _tally(self, task: Any) -> StageTally:
        stage = stage_of(task.name)
        now = self._clock()
        tally = self._stages.get(stage)
        if tally is None:
            tally = self._stages[stage] = StageTally(stage, started=now, last_event=now, printed_at=now)
        tally.seen.add(task.name)
        tally.last_event = now
        return tally

    def _finish(self, task: Any, outcome: TaskOutcome) -> None:
        tally = self._tally(task)
        tally.running.discard(task.name)
        if outcome == "done":
            tally.done += 1
        elif outcome == "up-to-date":
            tally.up_to_date += 1
        elif outcome == "failed":
            tally.failed += 1
        else:
            tally.ignored += 1
        self._show_progress(tally.name)

    # ---- doit reporter API ----------------------------------------------
    @_never_raises
    def initialize(self, tasks: Any, selected_tasks: Any) -> None:
        """doit starts running: remember what was asked for and start the live view."""
        with self._lock:
            self._selected = tuple(selected_tasks or ())
            if self._live is None:
                self._start_live_view()

    @_never_raises
    def get_status(self, task: Any) -> None:
        if self._counted(task):
            with self._lock:
                self._tally(task)

    @_never_raises
    def execute_task(self, task: Any) -> None:
        if self._counted(task):
            with self._lock:
                self._tally(task).running.add(task.name)
                stage = stage_of(task.name)
                if stage in LIVE_STAGES and stage not in self._first_work:
                    self._first_work[stage] = self._clock()

    @_never_raises
    def add_success(self, task: Any) -> None:
        if self._counted(task):
            with self._lock:
                failure = self._not_scored(task)
                if failure is not None:
                    self._record_failure(task, failure)
                else:
                    self._finish(task, "done")

    def _not_scored(self, task: Any) -> FailureNote | None:
        """A score task that succeeded for doit only so that the summary runs: its problem was not scored."""
        if stage_of(task.name) != "score" or ":" not in task.name:
            return None
        found = self._activity.not_scored(task.name.split(":", 1)[1])
        return None if found is None else FailureNote(task.name, found[0], found[1])

    def _record_failure(self, task: Any, note: FailureNote) -> None:
        self._notes.append(note)
        if note.group_key not in self._shown_failures:  # the same reason again: counted, listed at the end
            self._shown_failures.add(note.group_key)
            self._emit(f"FAILED {note.task_name}: {note.reason}")
        if self._counted(task):
            self._finish(task, "failed")

    @_never_raises
    def add_failure(self, task: Any, fail: BaseFail) -> None:
        if isinstance(fail, UnmetDependency) and not _has_actions(task):
            return  # a group task (e.g. `score`) whose sub-task failed: that failure is already reported
        with self._lock:
            self.failures.append({"task": task, "exception": fail})
            self._record_failure(task, describe_failure(task, fail, pipeline_error_names()))

    @_never_raises
    def skip_uptodate(self, task: Any) -> None:
        if self._counted(task):
            with self._lock:
                self._finish(task, "up-to-date")

    @_never_raises
    def skip_ignore(self, task: Any) -> None:
        if self._counted(task):
            with self._lock:
                self._finish(task, "ignored")

    @_never_raises
    def cleanup_error(self, exception: BaseFail) -> None:
        with self._lock:
            line = first_line(exception.message) or exception.get_name()
            self._cleanup_errors.append(line)
            self._emit(f"cleanup error: {line}")

    @_never_raises
    def runtime_error(self, msg: str) -> None:
        with self._lock:
            self.runtime_errors.append(msg)

    @_never_raises
    def teardown_task(self, task: Any) -> None:
        return None

    @_never_raises
    def complete_run(self) -> None:
        with self._lock:
            self._print_step_failures()
            self._close_live_view()
            if self._only_explanations():
                self._print_failures()
                return
            now = self._clock()
            self._emit(f"== run finished [{format_elapsed(now - self._started)}] ==")
            for tally in self._stages.values():
                self._emit(self._stage_line(tally, now))
                tally.printed_state, tally.printed_at = tally.state, now
            self._print_failures()
            if self.runtime_errors:
                self._emit("execution aborted: " + " | ".join(first_line(m) for m in self.runtime_errors))
            if self.nothing_ran:
                self._emit("nothing to do: everything up to date")

    def _only_explanations(self) -> bool:
        """`doit explain ...`: the command prints its explanations and nothing else (no run recap)."""
        return bool(self._selected) and all(name in EXPLANATION_TASKS for name in self._selected)

    @property
    def nothing_ran(self) -> bool:
        """No task executed or failed (everything reached was up to date or ignored), and no doit error."""
        return (
            not self._notes
            and not self.runtime_errors
            and all(t.done == 0 and t.failed == 0 and not t.running for t in self._stages.values())
        )

    def _print_failures(self) -> None:
        if not self._notes:
            return
        self._emit(f"{len(self._notes)} task(s) failed:")
        groups = group_failures(self._notes)
        for group in groups:
            self._emit(f"  {group.line(GROUP_NAMES_SHOWN)}")
        for group in groups:
            if group.detail:
                self._emit(f"---- {group.task_names[0]} ----\n{group.detail}")

    # ---- for tests and callers ------------------------------------------
    def stage_counts(self) -> dict[str, dict[str, int]]:
        """Per stage: reached, done, up_to_date, failed, ignored, running (a snapshot)."""
        with self._lock:
            return {
                name: {
                    "reached": len(t.seen),
                    "done": t.done,
                    "up_to_date": t.up_to_date,
                    "failed": t.failed,
                    "ignored": t.ignored,
                    "running": len(t.running),
                }
                for name, t in self._stages.items()
            }
