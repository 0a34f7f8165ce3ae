"""The order rules of a streaming run (`stages.execution.scheduling`) and the priority pool that applies them."""

from __future__ import annotations

import itertools
import threading
import time

from stages.execution.scheduling import ExpectedWork, generation_order, integer_priority, step_priority
from stages.execution.slots import PrioritySlots


def _ids(order: list[ExpectedWork]) -> list[str]:
    return [work.problem_id for work in order]


def test_the_slowest_to_score_first_then_two_by_test_seconds_per_answer_for_one_by_answers() -> None:
    problems = [
        ExpectedWork("ten-answers", answers=10, test_seconds=10.0),  # 1 s per answer
        ExpectedWork("eight-answers", answers=8, test_seconds=8.0),  # 1 s per answer
        ExpectedWork("tail", answers=4, test_seconds=82.0),
        ExpectedWork("five-per-answer", answers=1, test_seconds=5.0),
        ExpectedWork("four-per-answer", answers=1, test_seconds=4.0),
        ExpectedWork("three-per-answer", answers=1, test_seconds=3.0),
        ExpectedWork("two-per-answer", answers=1, test_seconds=2.0),
    ]
    assert _ids(generation_order(problems)) == [
        "tail",
        "five-per-answer",
        "four-per-answer",
        "ten-answers",
        "three-per-answer",
        "two-per-answer",
        "eight-answers",
    ]


def test_ties_keep_the_selection_order() -> None:
    problems = [ExpectedWork(name, 2, 2.0) for name in ("b", "a", "c")] + [ExpectedWork("d", 1, 1.0)]
    # "b" is the first of the slowest; "a" and "c" tie on both lists: selection order; "d" has as many seconds
    # per answer but fewer seconds in all, and fewer answers.
    assert _ids(generation_order(problems)) == ["b", "a", "c", "d"]
    assert generation_order([]) == []


def test_a_problem_without_scored_steps_is_ordered_without_dividing_by_zero() -> None:
    assert _ids(generation_order([ExpectedWork("all-prefilled", 0, 0.0), ExpectedWork("x", 1, 0.5)])) == [
        "x",
        "all-prefilled",
    ]


def test_steps_wait_with_their_problems_slowest_step_and_quick_steps_first() -> None:
    long_problem = [step_priority(80.0, seconds) for seconds in (1.0, 80.0, 0.1)]
    short_problem = [step_priority(10.0, seconds) for seconds in (10.0, 1.0)]
    ranked = sorted(long_problem + short_problem, reverse=True)
    assert ranked == [(80.0, -0.1), (80.0, -1.0), (80.0, -80.0), (10.0, -1.0), (10.0, -10.0)]


def test_the_integer_priority_keeps_the_order() -> None:
    priorities = [step_priority(p, s) for p, s in itertools.product((0.0, 0.5, 1.0, 44.0, 82.0), (0.1, 1.0, 82.0))]
    by_tuple = sorted(priorities, reverse=True)
    assert sorted(priorities, key=integer_priority, reverse=True) == by_tuple
    assert len({integer_priority(priority) for priority in priorities}) == len(priorities)


def test_the_pool_serves_tuple_priorities_greatest_first() -> None:
    slots = PrioritySlots(1)
    served: list[tuple[float, float]] = []
    waiting = [step_priority(10.0, 10.0), step_priority(80.0, 80.0), step_priority(80.0, 0.1), step_priority(10.0, 1)]

    def take(priority: tuple[float, float]) -> None:
        with slots.slot(priority):
            served.append(priority)

    with slots.slot((1000.0, 0.0)):
        threads = [threading.Thread(target=take, args=(priority,)) for priority in waiting]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10
        while len(slots._waiting) < len(waiting):
            assert time.monotonic() < deadline, "the steps never waited for the slot"
            time.sleep(0.01)
    for thread in threads:
        thread.join(timeout=10)
    assert served == sorted(waiting, reverse=True)
