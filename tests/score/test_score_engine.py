"""The engine's side of the harness channel: nonce check, single-use targets, verdict rules."""
from __future__ import annotations

import json
import socket

from stages.score.engine import SessionLog, _Channel, decide


def _channel() -> tuple[_Channel, socket.socket]:
    engine_end, child_end = socket.socketpair()
    return _Channel(engine_end, "n" * 64, (b"first", b"second"), SessionLog()), child_end


def _frame(record: dict) -> bytes:
    return json.dumps(record).encode()


def test_each_target_is_served_once_and_a_second_request_is_theft() -> None:
    channel, child = _channel()
    channel.handle(_frame({"type": "fetch", "test": 0, "nonce": "n" * 64}))
    assert child.recv(100)[8:] == b"Tfirst"
    channel.handle(_frame({"type": "fetch", "test": 0, "nonce": "n" * 64}))
    assert child.recv(100)[8:9] == b"R"
    status, reason = decide(channel.log, 0, 2, 10)
    assert status == "fail" and "targets read outside the test harness" in reason


def test_messages_without_the_nonce_are_tampering() -> None:
    channel, _child = _channel()
    channel.handle(_frame({"type": "complete", "passed": 2, "nonce": "x"}))
    channel.log.complete = True
    channel.log.passed = {0, 1}
    assert decide(channel.log, 0, 2, 10)[0] == "fail"


def test_pass_needs_completion_all_tests_and_exit_zero() -> None:
    log = SessionLog(passed={0, 1}, complete=True)
    assert decide(log, 0, 2, 10) == ("pass", "all 2 tests passed")
    assert decide(log, 1, 2, 10)[0] == "fail"
    assert decide(SessionLog(passed={0}, complete=True), 0, 2, 10)[0] == "fail"
    assert "early exit" in decide(SessionLog(passed={0, 1}), 0, 2, 10)[1]
    assert "SIGKILL" in decide(SessionLog(), -9, 2, 10)[1]
    assert decide(SessionLog(timed_out=True), -9, 2, 10)[0] == "timeout"
    assert decide(SessionLog(failure={"type": "deps_error", "reason": "x"}), 1, 2, 10)[0] == "eval_error"
