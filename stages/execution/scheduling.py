"""The order of a streaming run: which problem is generated first, which waiting test starts first.

`doit run` generates `concurrency` problems at once and scores each problem as soon as its generation ends,
on `score_workers` test processes. Such a run cannot end before either of:

* its slowest problem: its model answers, asked one after the other, then its test processes;
* all the test-process seconds spread over the workers, counted from the first moment a test can start.

Hence two rules, both from expected durations (the verdict cache's last measured durations, else the pinned
reference durations):

* **Generation order** (`generation_order`): the problem expected to take longest to score first, since its
  tail bounds the run; then, in turns, two problems with the most expected test seconds per answer (they give
  the test pool work soonest) and one with the most model answers (generation's own longest chain: admitted
  late, it ends the generation late); selection order among equals. Neither list alone holds up: slowest to
  score first for every problem leaves the test pool idle while the long problems are generated (the first
  15 s of a validation run at 3 s per answer), and test seconds per answer alone admits the eleven-answer
  problem late, which costs a quarter of the run when answers take 10 s or more. In a simulation of the
  validation split (measured test durations; 2 test processes; 2, 4 or 8 problems at once; 1 to 20 s per
  answer) these turns were never slower than one of each, and 2 s faster with 4 problems at up to 6 s per
  answer.
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
    most_answers = sorted(rest, key=lambda work: (-work.answers, -work.test_seconds))  # stable: selection order
    most_per_answer = sorted(rest, key=lambda work: (-work.test_seconds_per_answer, -work.test_seconds))
    order, taken = [tail], {tail.problem_id}
    per_answer, answers = iter(most_per_answer), iter(most_answers)
    turns = (per_answer, per_answer, answers)
    while len(order) < len(problems):
        for candidates in turns:
            work = next((work for work in candidates if work.problem_id not in taken), None)
            if work is not None:
                order.append(work)
                taken.add(work.problem_id)
    return order


def step_priority(problem_slowest_seconds: float, step_seconds: float) -> StepPriority:
    """The priority of a waiting step: its problem's slowest expected step, then the quicker step first."""
    return (problem_slowest_seconds, -step_seconds)


def integer_priority(priority: StepPriority) -> int:
    """The same order as one integer (milliseconds), for a scheduler whose priorities are integers (Dask)."""
    problem_ms, minus_step_ms = (round(seconds * 1000) for seconds in priority)
    return problem_ms * 10**9 + max(minus_step_ms, 1 - 10**9)
