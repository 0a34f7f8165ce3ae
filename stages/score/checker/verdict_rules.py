"""The rules of a verdict: what the engine saw of a step's test process and checker, and the verdict it makes.

Trusted, in the doit process. `SessionLog` holds what the engine saw; `on_test_frame` and `on_checker_frame`
take each frame of the two processes into it; `decide` turns it, with the test process's exit status, into a
status and a reason: `pass` needs every test judged passed by the checker, the test process's completion record
and exit code 0; a value that never arrives fails.

Total on whatever the test process sends: every frame is bounded before it is parsed, every parse of it catches
everything (deep nesting, invalid UTF-8), every text it takes from it is made valid UTF-8
(`stages.execution.untrusted.valid_text`) and bounded. The test process never chooses the kind of outcome: a failure it
reports is a failed test with its text as the reason, whatever kind it names; only what the trusted side
established itself is an `eval_error` (the checker could not start, the process could not be launched; targets
are checked before the launch).
"""

from __future__ import annotations

import json
import mmap
import signal
from dataclasses import dataclass, field
from typing import Protocol

from stages.execution.untrusted import valid_data, valid_text
from stages.statuses import StepStatus
from stages.storage.json_values import JSONObject, JSONValue

MAX_VALUES_HEADER_BYTES = 1 << 20  # the JSON header of a values frame (a name and a size per value)
MAX_RECORD_BYTES = 64 * 1024  # a record of the test process (its reasons are bounded to 2000 characters)
CHECKER_RECORD_BYTES = 64 * 1024
REASON_LIMIT = 2000
# A frame as the engine reads it: each in one buffer of its announced size, a large one in an anonymous mapping.
Frame = bytes | bytearray | mmap.mmap


class FrameSink(Protocol):
    """Where the values frames of the test process go on to (the engine's end of the checker's channel)."""

    def send(self, payload: Frame) -> bool: ...


@dataclass
class SessionLog:
    """What the engine saw from the test process and the checker.

    What the test process says is at most a failed test with its text as the reason (`failure`): the kind
    of failure it names is ignored. Only what the trusted side established is an `eval_error`: the checker
    could not start (`checker_error`: its dependencies do not import there either, unreadable targets).
    A checker that fails after it was sent a value fails the step (`checker_failure`)."""

    total: int
    forwarded: list[int] = field(default_factory=list)
    results: dict[int, tuple[bool, str]] = field(default_factory=dict)
    compared: dict[int, JSONObject] = field(default_factory=dict)  # what each failed check compared
    failure: tuple[int | None, str] | None = None  # (test, reason) of the first failure the test process reported
    complete: bool = False
    tamper: str | None = None
    checker_ready: bool = False
    checker_error: str | None = None
    checker_failure: str | None = None
    timed_out: bool = False
    test_closed: bool = False
    checker_closed: bool = False

    @property
    def passed(self) -> set[int]:
        return {index for index, (passed, _) in self.results.items() if passed}

    def first_failed_check(self) -> tuple[int, str] | None:
        failed = sorted((index, reason) for index, (passed, reason) in self.results.items() if not passed)
        return failed[0] if failed else None

    def deciding_comparison(self, reason: str) -> JSONObject | None:
        """What the failed check behind a `fail` with `reason` compared (None when another failure decided)."""
        failed = self.first_failed_check()
        return self.compared.get(failed[0]) if failed is not None and failed[1] == reason else None

    def first_unjudged(self) -> int:
        """The first test sent to the checker that it has not judged (else the next one)."""
        return next((index for index in self.forwarded if index not in self.results), len(self.forwarded))

    def checker_stopped(self, why: str) -> None:
        """The checker went away (or broke its protocol): a failed test once it was sent a value, else (it
        never received one) an evaluation error."""
        if self.forwarded and self.checker_ready:
            self.checker_failure = (
                self.checker_failure or f"the checker {why} while judging test {self.first_unjudged() + 1}"
            )
        else:
            self.checker_error = self.checker_error or f"the checker {why} before judging any test"

    def settled(self) -> bool:
        """Nothing more can change the verdict."""
        if self.timed_out or self.tamper or self.checker_error or self.checker_failure or self.first_failed_check():
            return True
        # The checker's start decides too: dependencies it cannot import either make an `eval_error`, however early
        # the test process gave up.
        checker_known = self.checker_ready or self.checker_closed or bool(self.results)
        answered = all(index in self.results for index in self.forwarded) or self.checker_closed
        return (self.test_closed or self.failure is not None or self.complete) and answered and checker_known


def _json_record(frame: Frame, limit: int) -> JSONObject | None:
    """A `J` record of at most `limit` bytes, parsed; None for anything else (never raises)."""
    if frame[:1] != b"J" or len(frame) > limit:
        return None
    try:
        record = json.loads(frame[1:].decode("utf-8"))
    except Exception:  # noqa: BLE001 - invalid UTF-8 or JSON, nesting deeper than the parser's recursion
        return None
    return record if isinstance(record, dict) else None


def _announced_test(frame: Frame) -> int | None:
    """The test a `V` frame says it holds (its JSON header, bounded before parsing); None when unreadable."""
    size = int.from_bytes(frame[1:5], "big")
    if len(frame) < 5 or size > MAX_VALUES_HEADER_BYTES:
        return None
    try:
        header = json.loads(frame[5 : 5 + size].decode("utf-8"))
    except Exception:  # noqa: BLE001 - see _json_record
        return None
    test = header.get("test") if isinstance(header, dict) else None
    return test if type(test) is int else None


def _text(value: JSONValue, default: str) -> str:
    """A reason from a record: text only, valid UTF-8, bounded."""
    return valid_text(value)[:REASON_LIMIT] if isinstance(value, str) and value else default


def on_test_frame(log: SessionLog, frame: Frame, checker: FrameSink) -> None:
    """Take one frame of the test process: a values frame goes on to the checker (`checker`), in test order."""
    if frame[:1] == b"V":
        index = len(log.forwarded)
        announced = _announced_test(frame)
        if announced != index or index >= log.total:
            shown = "an unreadable header" if announced is None else f"test {announced + 1}"
            log.tamper = log.tamper or (
                f"the test process sent values out of order (expected test {index + 1}, got {shown})"
            )
            return
        log.forwarded.append(index)
        if not checker.send(frame):
            log.checker_closed = True
            log.checker_stopped("stopped reading")
        return
    record = _json_record(frame, MAX_RECORD_BYTES)
    if record is None:
        log.tamper = log.tamper or "a malformed message arrived from the test process"
    elif record.get("type") == "done":
        if len(log.forwarded) < log.total:
            log.tamper = log.tamper or (
                f"the test process reported completion after {len(log.forwarded)} of {log.total} tests"
            )
        log.complete = True
    elif log.failure is None:
        test = record.get("test")
        log.failure = (
            test if type(test) is int and 0 <= test < log.total else None,
            _text(record.get("reason"), "the test process reported a failure without a reason"),
        )


def on_checker_frame(log: SessionLog, frame: Frame) -> None:
    """Take one reply of the checker."""
    record = _json_record(frame, CHECKER_RECORD_BYTES)
    if record is None:
        log.checker_stopped("sent a malformed message")
        return
    kind, test = record.get("type"), record.get("test")
    if kind == "ready":
        log.checker_ready = True
    elif kind == "checker_error":
        log.checker_error = log.checker_error or _text(record.get("reason"), "the checker could not start")
    elif type(test) is int and 0 <= test < log.total:
        log.results[test] = (record.get("passed") is True, _text(record.get("reason"), f"test {test + 1} judged"))
        compared = record.get("compared")
        if record.get("passed") is not True and isinstance(compared, dict):
            log.compared[test] = valid_data(compared)
    else:
        log.tamper = log.tamper or _text(record.get("reason"), "the checker refused the values sent")


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _first_failure(log: SessionLog) -> str | None:
    """The earliest failure in test order: one the test process reported (whatever kind it named), a failed
    check, or the checker failing after it was sent a value."""
    candidates: list[tuple[int, str]] = []
    if log.failure is not None:
        test, reason = log.failure
        candidates.append((test if test is not None else -1, reason))
    failed = log.first_failed_check()
    if failed is not None:
        candidates.append(failed)
    if log.checker_failure is not None:
        candidates.append((log.first_unjudged(), log.checker_failure))
    return min(candidates)[1] if candidates else None


def decide(log: SessionLog, returncode: int | None, timeout_seconds: float) -> tuple[StepStatus, str]:
    """The verdict of one execution (see the module docstring and `SessionLog`)."""
    total = log.total
    if log.checker_error:
        return "eval_error", f"the checker failed: {log.checker_error}"
    if log.tamper:
        return "fail", log.tamper
    if log.timed_out:
        return (
            "timeout",
            f"the tests did not finish within step_timeout_seconds={timeout_seconds:g} (process group killed)",
        )
    failure = _first_failure(log)
    if failure is not None:
        return "fail", failure
    done = f"after {len(log.passed)} of {total} tests"
    if log.complete and len(log.passed) == total:
        if returncode != 0:
            return "fail", f"all tests passed but the test process ended with code {returncode}"
        return "pass", f"all {total} tests passed"
    if returncode is None:
        return "eval_error", "the test process ended without an exit status (the zygote stopped)"
    if returncode < 0:
        return "fail", f"the test process was killed by {_signal_name(returncode)} {done} (no completion record)"
    if returncode == 0:
        return (
            "fail",
            f"the test process exited with code 0 {done} without a completion record (early exit is not a pass)",
        )
    return "fail", f"the test process exited with code {returncode} {done} without a completion record"
