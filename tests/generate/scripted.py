"""Scripted responders for the local model server, shared by the generation tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class Script:
    """A responder answering the scripted replies in order (the last one repeats)."""

    def __init__(self, *replies: Any) -> None:
        self.replies = list(replies)
        self.lock = threading.Lock()

    def __call__(self, request: Any) -> Any:
        with self.lock:
            return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]


class InFlightCounter:
    """Wraps a responder; `peak` is the largest number of requests it was answering at once."""

    def __init__(self, answer: Callable[[Any], Any], hold_seconds: float) -> None:
        self.answer = answer
        self.hold_seconds = hold_seconds
        self.now = 0
        self.peak = 0
        self.lock = threading.Lock()

    def __call__(self, request: Any) -> Any:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        time.sleep(self.hold_seconds)
        with self.lock:
            self.now -= 1
        return self.answer(request)


class FakeTime:
    """Instant backoff for the model client: `sleep` records the delay and moves `clock` on by it, so waits that
    are bounded by time (the wait for an unavailable server) end as they would, without waiting."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now

    def install(self, monkeypatch: Any) -> FakeTime:
        from stages.generate import client

        monkeypatch.setattr(client, "sleep", self.sleep)
        monkeypatch.setattr(client, "clock", self.clock)
        client.OUTAGES.reset()
        return self
