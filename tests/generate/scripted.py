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
