"""The order of a streaming run: which problem is generated first, which waiting test starts first.

`doit run` generates `concurrency` problems at once and scores each problem as soon as its generation ends,
on `score_workers` test processes. Such a run cannot end before either of:

* its slowest problem: its model answers, asked one after the other, then its test processes;
* all the test-process seconds spread over the workers, counted from the first moment a test can start.

Hence two rules, both from expected durations (the verdict cache's last measured durations, else the pinned
reference durations):

* **Generation order** (`generation_order`): the problem expected to take longest to score first, since its
  tail bounds the run; then the problems that give the test pool the most work per model answer (expected test
  seconds / answers), so the pool is busy from the first answers instead of idle until the long problems are
  generated; then selection order. Slowest-to-score first for every problem leaves the test pool idle while
  the long problems are being generated (with four answers each, the first 15 s of a validation run).
* **Test order** (`step_priority`): a waiting step takes its problem's priority, the expected seconds of the
  problem's slowest step (longest first), and within a problem its quick steps go first. Long steps start as
  early as with longest-step-first, and a problem's verdict file is written when its slowest step ends, not
  after every other problem's long steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

StepPriority = tuple[float, float]  # compared as a tuple, the greatest served first


@dataclass(frozen=True)
class ExpectedWork:
    """What scoring one attempt of a problem is expected to take."""

    problem_id: str
    answers: int  # model answers one attempt needs (its scored steps), asked one after the other
    test_seconds: float  # expected test-process seconds of its scored steps

    @property
    def test_seconds_per_answer(self) -> float:
        return self.test_seconds / max(self.answers, 1)


def generation_order(problems: Sequence[ExpectedWork]) -> list[ExpectedWork]:
    """`problems` (in selection order) in the order to generate them (see the module docstring)."""
    if not problems:
        return []
    tail = max(problems, key=lambda work: work.test_seconds)  # the first of equals: selection order
    rest = [work for work in problems if work is not tail]
    rest.sort(key=lambda work: (-work.test_seconds_per_answer, -work.test_seconds))  # stable: selection order
    return [tail, *rest]


def step_priority(problem_slowest_seconds: float, step_seconds: float) -> StepPriority:
    """The priority of a waiting step: its problem's slowest expected step, then the quicker step first."""
    return (problem_slowest_seconds, -step_seconds)


def integer_priority(priority: StepPriority) -> int:
    """The same order as one integer (milliseconds), for a scheduler whose priorities are integers (Dask)."""
    problem_ms, minus_step_ms = (round(seconds * 1000) for seconds in priority)
    return problem_ms * 10**9 + max(minus_step_ms, 1 - 10**9)
