"""Bounded pools of slots shared by every thread of the process, highest priority first.

`PrioritySlots` is generic: the scoring executor draws its test-process slots from one (`shared_slots`), and the
generate stage admits problems through one (`named_slots`, with a settling time: doit starts the problem threads
in a burst, and without it whichever thread reached the pool first would take a free slot before the
higher-priority threads started a moment later had queued).

doit runs `score:<id>` tasks in threads of one process, and each task scores its steps in threads:
all of them draw from one module-level `PrioritySlots` per worker count, so at most
`settings.score_workers` test processes run at once across the whole run. Waiters are served by
`stages.execution.scheduling.step_priority` (from expected durations), then in arrival order.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

Priority = float | tuple[float, ...]  # the greatest is served first; tuples compare element by element


class PrioritySlots:
    """At most `capacity` holders at once; waiters are served highest priority first, then in arrival order.

    With `settle_s` > 0, an arrival at an idle pool (nobody holding or waiting) opens a settling window:
    nobody is admitted until it closes, so threads started together are all queued (and ordered) before
    the first of them gets a slot."""

    def __init__(self, capacity: int, settle_s: float = 0.0) -> None:
        if capacity < 1:
            raise ValueError(f"invalid score_workers={capacity}: expected a whole number >= 1")
        self.capacity = capacity
        self.settle_s = settle_s
        self._open_at = 0.0  # time.monotonic() at which the current settling window closes
        self.active = 0
        self.peak = 0
        self._waiting: list[tuple[tuple[float, ...], int]] = []
        self._order = itertools.count()
        self._condition = threading.Condition()

    @contextmanager
    def slot(self, priority: Priority) -> Iterator[None]:
        """Hold one slot; among waiters, the greatest priority goes first."""
        ranks = priority if isinstance(priority, tuple) else (priority,)
        entry = (tuple(-float(rank) for rank in ranks), next(self._order))
        with self._condition:
            if self.active == 0 and not self._waiting:
                self._open_at = time.monotonic() + self.settle_s
            heapq.heappush(self._waiting, entry)
            while (settling := self._open_at - time.monotonic()) > 0:
                self._condition.wait(timeout=settling)
            while self._waiting[0] != entry or self.active >= self.capacity:
                self._condition.wait()
            heapq.heappop(self._waiting)
            self.active += 1
            self.peak = max(self.peak, self.active)
            self._condition.notify_all()
        try:
            yield
        finally:
            with self._condition:
                self.active -= 1
                self._condition.notify_all()


_POOLS: dict[tuple[str, int], PrioritySlots] = {}
_POOLS_LOCK = threading.Lock()


def named_slots(name: str, capacity: int, settle_s: float = 0.0) -> PrioritySlots:
    """The process-wide pool called `name` with `capacity` slots (one per name and capacity)."""
    with _POOLS_LOCK:
        pool = _POOLS.get((name, capacity))
        if pool is None:
            pool = _POOLS[(name, capacity)] = PrioritySlots(capacity, settle_s)
        return pool


def shared_slots(capacity: int) -> PrioritySlots:
    """The process-wide pool of test processes for `capacity` workers."""
    return named_slots("test processes", capacity)
