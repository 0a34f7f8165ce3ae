"""A bounded pool of test-process slots shared by every thread of the process, longest step first.

`PrioritySlots` is generic (the generate stage also admits problems through one, `named_slots`).

doit runs `score:<id>` tasks in threads of one process, and each task scores its steps in threads:
all of them draw from one module-level `PrioritySlots` per worker count, so at most
`settings.score_workers` test processes run at once across the whole run. Waiters are served by
expected duration (largest first, from the verdict cache's last durations), then in arrival order.
"""
from __future__ import annotations

import heapq
import itertools
import threading
from contextlib import contextmanager
from typing import Iterator


class PrioritySlots:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"invalid score_workers={capacity}: expected a whole number >= 1")
        self.capacity = capacity
        self.active = 0
        self.peak = 0
        self._waiting: list[tuple[float, int]] = []
        self._order = itertools.count()
        self._condition = threading.Condition()

    @contextmanager
    def slot(self, expected_seconds: float) -> Iterator[None]:
        """Hold one slot; among waiters, the longest expected step goes first."""
        entry = (-float(expected_seconds), next(self._order))
        with self._condition:
            heapq.heappush(self._waiting, entry)
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


def named_slots(name: str, capacity: int) -> PrioritySlots:
    """The process-wide pool called `name` with `capacity` slots (one per name and capacity)."""
    with _POOLS_LOCK:
        pool = _POOLS.get((name, capacity))
        if pool is None:
            pool = _POOLS[(name, capacity)] = PrioritySlots(capacity)
        return pool


def shared_slots(capacity: int) -> PrioritySlots:
    """The process-wide pool of test processes for `capacity` workers."""
    return named_slots("test processes", capacity)
