"""What the run is doing right now: gauges and tallies the stages publish and the live view reads.

One process-wide `ACTIVITY` (doit runs every task in threads of one process):

* gauges, held with `ACTIVITY.busy(gauge)` around the work they count: `model_calls` (requests in
  flight, stages.generate.client) and `test_processes` (test processes running on this machine,
  stages.score.parent.executor's local executor);
* tallies: the number of problems the task graph holds and the steps their generation is to answer (set when
  the problem tasks are created), the steps answered so far (`add_generated_step`: asked in this run or found),
  the problems whose generation ended in error although their task finished (`add_generation_failure`), and
  the scored steps of attempt 0 of every problem scored or found up to date (`add_scored`);
* the problems whose scoring failed (`add_not_scored`): their tasks succeed for doit (so that the summary
  still runs), and the reporter shows them as failed;
* the failed steps, as soon as each verdict is known (`add_step_failure`, from stages.score.parent.stage while the
  problem's other steps may still run): the reporter takes them (`take_step_failures`) and prints each once.
  At most `MAX_PENDING_FAILURES` wait to be taken; beyond that they are counted, not kept.

Publishing never blocks on the display and never fails the work: the live view only reads snapshots.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from stages.statuses import StepStatus

Gauge = Literal["model_calls", "test_processes"]
GAUGES: tuple[Gauge, ...] = ("model_calls", "test_processes")
MAX_PENDING_FAILURES = 10_000


@dataclass(frozen=True)
class StepFailure:
    """Steps of one problem's attempt that failed with one status and one reason (model-derived text: shown
    through `stages.execution.untrusted.shown`). Usually one step; the steps a generation error left unanswered share it."""

    problem_id: str
    attempt: int
    step_ids: tuple[str, ...]
    # as the counts say it: a failing step the model never answered is not_generated
    status: StepStatus | Literal["not_generated"]
    reason: str


@dataclass(frozen=True)
class ActivitySnapshot:
    problems: int | None  # problems in the task graph; None until the problem tasks exist
    model_calls: int  # model requests in flight
    test_processes: int  # test processes running here
    steps_passed: int  # scored steps that passed (attempt 0), over the problems counted so far
    steps_scored: int  # scored steps (attempt 0; prefilled steps excluded)
    generations_failed: int = 0  # problems whose generation task finished with a generation error
    steps_to_generate: int = 0  # steps the run's generation tasks are to answer (prefilled steps excluded)
    steps_generated: int = 0  # of those, the steps with a final answer so far (asked now or found)
    steps_asked: int = 0  # of those, the steps a model was asked in this run (the rate of the generation ETA)

    @property
    def pass_rate(self) -> float | None:
        return self.steps_passed / self.steps_scored if self.steps_scored else None


class Activity:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gauges: dict[Gauge, int] = dict.fromkeys(GAUGES, 0)
        self._problems: int | None = None
        self._scored: dict[str, tuple[int, int]] = {}
        self._not_scored: dict[str, tuple[str, str | None]] = {}
        self._generation_failures: set[str] = set()
        self._steps_to_generate = 0
        self._generated_steps: dict[tuple[str, int, str], bool] = {}  # (problem, attempt, step) -> asked now
        self._step_failures: list[StepFailure] = []
        self._published_steps: set[tuple[str, int, str]] = set()
        self._unkept_failures = 0

    @contextmanager
    def busy(self, gauge: Gauge) -> Iterator[None]:
        """Count one unit of `gauge` for the duration of the block."""
        with self._lock:
            self._gauges[gauge] += 1
        try:
            yield
        finally:
            with self._lock:
                self._gauges[gauge] -= 1

    def set_problems(self, count: int) -> None:
        with self._lock:
            self._problems = count

    def set_steps_to_generate(self, count: int) -> None:
        with self._lock:
            self._steps_to_generate = count

    def add_generated_step(self, problem_id: str, attempt: int, step_id: str, *, asked: bool) -> None:
        """A step with its final answer (`asked`: the model was asked it in this run; else it was found)."""
        with self._lock:
            key = (problem_id, attempt, step_id)
            self._generated_steps[key] = self._generated_steps.get(key, False) or asked

    def add_scored(self, problem_id: str, passed: int, scored: int) -> None:
        """The scored steps of one problem (attempt 0); a problem counted again replaces its earlier figures."""
        with self._lock:
            self._scored[problem_id] = (passed, scored)

    def add_not_scored(self, problem_id: str, reason: str, detail: str | None) -> None:
        """A problem whose scoring failed: the one-line reason, and the traceback of an unexpected error."""
        with self._lock:
            self._not_scored[problem_id] = (reason, detail)

    def not_scored(self, problem_id: str) -> tuple[str, str | None] | None:
        with self._lock:
            return self._not_scored.get(problem_id)

    def add_generation_failure(self, problem_id: str) -> None:
        """A problem whose generation task finished but recorded a generation error (the model call failed)."""
        with self._lock:
            self._generation_failures.add(problem_id)

    def add_step_failure(self, failure: StepFailure) -> None:
        """Steps whose verdict is a failure, to be printed once: a step published before is left out."""
        with self._lock:
            fresh = tuple(
                step_id
                for step_id in failure.step_ids
                if (failure.problem_id, failure.attempt, step_id) not in self._published_steps
            )
            if not fresh:
                return
            self._published_steps.update((failure.problem_id, failure.attempt, step_id) for step_id in fresh)
            if len(self._step_failures) >= MAX_PENDING_FAILURES:
                self._unkept_failures += len(fresh)
                return
            self._step_failures.append(dataclasses.replace(failure, step_ids=fresh))

    def take_step_failures(self) -> tuple[list[StepFailure], int]:
        """The failures published since the last call, and how many more steps failed without being kept."""
        with self._lock:
            taken, unkept = self._step_failures, self._unkept_failures
            self._step_failures, self._unkept_failures = [], 0
            return taken, unkept

    def snapshot(self) -> ActivitySnapshot:
        with self._lock:
            return ActivitySnapshot(
                problems=self._problems,
                model_calls=self._gauges["model_calls"],
                test_processes=self._gauges["test_processes"],
                steps_passed=sum(passed for passed, _ in self._scored.values()),
                steps_scored=sum(scored for _, scored in self._scored.values()),
                generations_failed=len(self._generation_failures),
                steps_to_generate=self._steps_to_generate,
                steps_generated=len(self._generated_steps),
                steps_asked=sum(self._generated_steps.values()),
            )


ACTIVITY = Activity()
