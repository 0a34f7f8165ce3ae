"""The engine's relay between the test process and the checker, and the verdict rules."""

from __future__ import annotations

import json
import socket
import time

import pytest

from stages.score.checker.verdict_rules import SessionLog, decide, on_checker_frame, on_test_frame
from stages.score.parent.engine import _Peer


def _values(test: int) -> bytes:
    header = json.dumps({"test": test, "temps": []}).encode()
    return b"V" + len(header).to_bytes(4, "big") + header


def _record(record: dict) -> bytes:
    return b"J" + json.dumps(record).encode()


def _checker() -> tuple[_Peer, socket.socket]:
    engine_end, checker_end = socket.socketpair()
    return _Peer(engine_end, 1 << 20), checker_end


def test_values_are_forwarded_in_order_and_out_of_order_values_are_tampering() -> None:
    checker, checker_end = _checker()
    log = SessionLog(total=3)
    on_test_frame(log, _values(0), checker)
    assert log.forwarded == [0] and log.tamper is None
    assert checker_end.recv(1 << 16)[8:] == _values(0)  # forwarded unchanged, framed
    on_test_frame(log, _values(2), checker)
    assert "out of order" in (log.tamper or "")


def test_a_completion_before_every_test_sent_its_values_is_tampering() -> None:
    checker, _ = _checker()
    log = SessionLog(total=2)
    on_test_frame(log, _values(0), checker)
    on_test_frame(log, _record({"type": "done"}), checker)
    assert "completion after 1 of 2 tests" in (log.tamper or "")
    assert decide(log, 0, 10)[0] == "fail"


def test_malformed_messages_from_either_side() -> None:
    checker, _ = _checker()
    log = SessionLog(total=1)
    on_test_frame(log, b"junk", checker)
    assert decide(log, 0, 10) == ("fail", "a malformed message arrived from the test process")
    log = SessionLog(total=1)
    on_checker_frame(log, b"junk")  # before any value was sent to it: the trusted side failed
    assert log.checker_error and decide(log, 0, 10)[0] == "eval_error"


def _judged(
    total: int,
    results: dict[int, tuple[bool, str]],
    *,
    complete: bool = True,
    failure: tuple[int | None, str] | None = None,
) -> SessionLog:
    return SessionLog(total=total, forwarded=list(results), results=dict(results), complete=complete, failure=failure)


def test_pass_needs_every_test_judged_passed_completion_and_exit_zero() -> None:
    passed = {0: (True, "test 1 passed"), 1: (True, "test 2 passed")}
    assert decide(_judged(2, passed), 0, 10) == ("pass", "all 2 tests passed")
    assert decide(_judged(2, passed), 1, 10)[0] == "fail"
    assert decide(_judged(2, passed, complete=False), 0, 10) == (
        "fail",
        "the test process exited with code 0 after 2 of 2 tests without a completion record (early exit is not a pass)",
    )
    assert decide(_judged(3, passed, complete=False), -9, 10)[1].startswith(
        "the test process was killed by SIGKILL after 2 of 3"
    )


def test_the_earliest_failure_in_test_order_is_the_reason() -> None:
    results = {0: (True, "test 1 passed"), 1: (False, "test 2 failed: AssertionError")}
    log = _judged(3, results, complete=False, failure=(2, "test 3 raised ValueError"))
    assert decide(log, 1, 10) == ("fail", "test 2 failed: AssertionError")
    code_error = _judged(1, {}, complete=False, failure=(None, "step 1.1 code raised X"))
    assert decide(code_error, 1, 10) == ("fail", "step 1.1 code raised X")


@pytest.mark.parametrize("kind", ["deps_error", "runner_error", "code_error", "test_error", "checker_error", "x"])
def test_the_test_process_never_chooses_the_kind_of_outcome(kind: str) -> None:
    checker, _ = _checker()
    log = SessionLog(total=1)
    on_test_frame(log, _record({"type": kind, "test": 0, "reason": "targets missing: stage the file"}), checker)
    assert decide(log, 1, 10) == ("fail", "targets missing: stage the file")


def test_only_a_checker_that_could_not_start_is_an_evaluation_error() -> None:
    log = SessionLog(total=2)
    on_checker_frame(log, _record({"type": "checker_error", "reason": "checker could not start: No module x"}))
    assert decide(log, 1, 10) == ("eval_error", "the checker failed: checker could not start: No module x")
    before_any_value = SessionLog(total=2)
    on_checker_frame(before_any_value, _record({"type": "ready"}))
    before_any_value.checker_stopped("ended")
    assert decide(before_any_value, None, 10)[0] == "eval_error"


def test_a_checker_that_fails_after_it_was_sent_a_value_fails_that_test() -> None:
    checker, _ = _checker()
    log = SessionLog(total=2)
    on_checker_frame(log, _record({"type": "ready"}))
    on_test_frame(log, _values(0), checker)
    on_checker_frame(log, _record({"test": 0, "passed": True, "reason": "test 1 passed"}))
    on_test_frame(log, _values(1), checker)
    log.checker_stopped("ended")
    assert decide(log, 0, 10) == ("fail", "the checker ended while judging test 2")
    garbled = SessionLog(total=1, forwarded=[0], checker_ready=True)
    on_checker_frame(garbled, b"J[" * 100_000)
    assert decide(garbled, 0, 10) == ("fail", "the checker sent a malformed message while judging test 1")


def test_timeout_wins_over_everything_but_tampering() -> None:
    log = _judged(1, {0: (True, "ok")})
    log.timed_out = True
    assert decide(log, None, 7)[0] == "timeout" and "7" in decide(log, None, 7)[1]
    log.tamper = "forged"
    assert decide(log, None, 7) == ("fail", "forged")


def test_settled_waits_for_pending_checks() -> None:
    log = SessionLog(total=2, forwarded=[0, 1], results={0: (True, "")}, complete=True)
    assert not log.settled()
    log.results[1] = (True, "")
    assert log.settled()
    log = SessionLog(total=2, forwarded=[0], results={0: (False, "test 1 failed")})
    assert log.settled()  # the first failed check ends the step at once


def test_a_test_process_that_gives_up_first_waits_for_the_checker_to_start() -> None:
    """Dependencies that fail in the test process before the checker has started: the checker's start decides
    between a failed step (it imports them) and an evaluation error (it cannot either)."""
    checker, _ = _checker()
    log = SessionLog(total=1)
    on_test_frame(log, _record({"type": "deps_error", "reason": "required dependencies failed"}), checker)
    assert not log.settled()
    on_checker_frame(log, _record({"type": "checker_error", "reason": "checker could not start: no module"}))
    assert log.settled()
    assert decide(log, 1, 10)[0] == "eval_error"
    started = SessionLog(total=1)
    on_test_frame(started, _record({"type": "deps_error", "reason": "required dependencies failed"}), checker)
    on_checker_frame(started, _record({"type": "ready"}))
    assert started.settled()
    assert decide(started, 1, 10) == ("fail", "required dependencies failed")


def test_a_frame_is_read_into_one_buffer_of_its_size_and_never_copied() -> None:
    import threading
    import tracemalloc

    from stages.score.parent.engine import frame_buffer

    engine_end, test_end = socket.socketpair()
    peer = _Peer(engine_end, 64 << 20)
    payload = b"V" + bytes(range(256)) * (32 << 12)  # 32 MiB and a byte
    writer = threading.Thread(target=test_end.sendall, args=(len(payload).to_bytes(8, "big") + payload,))
    tracemalloc.start()
    try:
        writer.start()
        frames: list = []
        while not frames:
            frames = peer.receive() or []
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        writer.join()
    assert len(frames) == 1 and type(frames[0]) is type(frame_buffer(len(payload)))
    assert frames[0][:] == payload
    assert peak < 1 << 20  # the frame's one buffer is an anonymous mapping; nothing of its size was allocated besides
    engine_end.close()
    test_end.close()


def test_a_frame_goes_on_to_a_busy_checker_without_waiting_for_it() -> None:
    checker, checker_end = _checker()
    log = SessionLog(total=1)
    big = _values(0) + bytes(8 << 20)  # far more than a socket buffer
    started = time.monotonic()
    on_test_frame(log, big, checker)  # the checker reads nothing: queued, not waited for
    assert time.monotonic() - started < 1.0 and checker.pending() and log.forwarded == [0]
    received = bytearray()
    while checker.pending() or len(received) < len(big) + 8:
        checker.flush()
        received.extend(checker_end.recv(1 << 20))
    assert bytes(received[8:]) == big
