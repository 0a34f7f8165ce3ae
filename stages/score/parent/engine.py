"""Running one step: the untrusted test process, the trusted checker, and the verdict.

`execute_step(job)` creates a scratch folder and starts two processes (zygote forks, or fresh ones):

* the **test process** (`test_process/runner.py`, confined: PID 1 of new namespaces, a size-limited tmpfs scratch,
  Landlock, no capabilities, seccomp, memory limit, scrubbed environment) runs the code and each test cell's
  model side, and sends the values the tests compare (plain data, `wire.py`); it never receives a target;
* the **checker** (`checker/checker.py`, never runs model code) receives the step's targets and every test's
  comparison statements, and judges each test from the values the engine forwards to it.

The engine forwards values frame by frame without decoding them, stops at the first failed test,
enforces the timeout by killing the test process's group (its namespace goes with it), collects bounded
stdout/stderr, and returns a `StepVerdict` (`decide`): `pass` needs every test judged passed by the
checker, the test process's completion record and exit code 0; a value that never arrives fails.

It is total on whatever the test process sends: every frame is bounded before it is parsed, every parse
of it catches everything (deep nesting, invalid UTF-8), every text it takes from it is made valid UTF-8
(`stages.untrusted.valid_text`) and bounded. The test process never chooses the kind of outcome: a
failure it reports is a failed test with its text as the reason, whatever kind it names; only what the
trusted side established itself is an `eval_error` (the checker could not start, the process could not
be launched; targets are checked before the launch).
"""

from __future__ import annotations

import json
import os
import pickle
import select
import signal
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from stages import live_processes
from stages.confinement import DEFAULT_SCRATCH_LIMIT_MB
from stages.isolation import DEFAULT_OUTPUT_LIMIT, BoundedReader, ScratchDir, scrubbed_environment
from stages.score.checker.rewrite import RewrittenTest, checker_scope
from stages.score.parent.launcher import Launched, LaunchError, Role, kill_group, launch
from stages.score.shared import child_runtime
from stages.statuses import StepStatus
from stages.untrusted import valid_data, valid_text
from stages.verdict import StepVerdict

OUTPUT_LIMIT_BYTES = DEFAULT_OUTPUT_LIMIT
CHECKER_ERROR_LIMIT = 8 * 1024
MAX_VALUES_FRAME_BYTES = 1 << 30
MAX_VALUES_HEADER_BYTES = 1 << 20  # the JSON header of a values frame (a name and a size per value)
MAX_RECORD_BYTES = 64 * 1024  # a record of the test process (its reasons are bounded to 2000 characters)
CHECKER_RECORD_BYTES = 64 * 1024
REASON_LIMIT = 2000
EXIT_GRACE_SECONDS = 10.0
SCRATCH_PREFIX = "scicode-step-"
PROTOCOL_VERSION = 2
PICKLE_PROTOCOL = 4


@dataclass(frozen=True)
class StepJob:
    problem_id: str
    step_id: str
    deps: str
    sections: tuple[tuple[str, str], ...]
    tests: tuple[RewrittenTest, ...]
    modules: tuple[str, ...]
    target_pickles: tuple[bytes, ...]
    python_binary: str
    timeout_seconds: float
    memory_mb: int | None
    targets_file: str | None
    use_zygote: bool = True
    scratch_limit_mb: int = DEFAULT_SCRATCH_LIMIT_MB

    def test_spec(self) -> dict[str, Any]:
        """What the test process receives: code and each cell's model side; no target, no comparison."""
        return {
            "protocol": PROTOCOL_VERSION,
            "step_id": self.step_id,
            "deps": self.deps,
            "sections": [{"label": label, "code": code} for label, code in self.sections],
            "tests": [{"index": t.index, "prefetch": t.prefetch} for t in self.tests],
            "modules": list(self.modules),
        }

    def checker_spec(self) -> dict[str, Any]:
        """What the checker receives: what it runs of the dependencies and each test's comparisons (targets
        follow)."""
        return {
            "protocol": PROTOCOL_VERSION,
            "step_id": self.step_id,
            "deps": checker_scope(self.deps).program,
            "tests": [{"index": t.index, "check": t.check, "temps": list(t.temps)} for t in self.tests],
        }


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
    compared: dict[int, dict[str, Any]] = field(default_factory=dict)  # what each failed check compared
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

    def deciding_comparison(self, reason: str) -> dict[str, Any] | None:
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
        answered = all(index in self.results for index in self.forwarded) or self.checker_closed
        return (self.test_closed or self.failure is not None or self.complete) and answered


class _Peer:
    """One socket of the engine: frames in (bounded), frames out."""

    def __init__(self, sock: socket.socket, limit: int) -> None:
        self.sock = sock
        self.limit = limit
        self.buffer = bytearray()

    def send(self, payload: bytes) -> bool:
        try:
            self.sock.sendall(len(payload).to_bytes(child_runtime.HEADER_BYTES, "big") + payload)
            return True
        except OSError:
            return False

    def receive(self) -> list[bytes] | None:
        """Complete frames received so far; None at end of stream. ValueError for an oversized frame."""
        try:
            chunk = self.sock.recv(1 << 20)
        except OSError:
            chunk = b""
        if not chunk:
            return None
        self.buffer.extend(chunk)
        frames = []
        header = child_runtime.HEADER_BYTES
        while len(self.buffer) >= header:
            size = int.from_bytes(self.buffer[:header], "big")
            if size > self.limit:
                raise ValueError(f"a frame of {size} bytes (the limit is {self.limit})")
            if len(self.buffer) < header + size:
                break
            frames.append(bytes(self.buffer[header : header + size]))
            del self.buffer[: header + size]
        return frames


def _json_record(frame: bytes, limit: int) -> dict[str, Any] | None:
    """A `J` record of at most `limit` bytes, parsed; None for anything else (never raises)."""
    if frame[:1] != b"J" or len(frame) > limit:
        return None
    try:
        record = json.loads(frame[1:].decode("utf-8"))
    except Exception:  # noqa: BLE001 - invalid UTF-8 or JSON, nesting deeper than the parser's recursion
        return None
    return record if isinstance(record, dict) else None


def _announced_test(frame: bytes) -> int | None:
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


def _text(value: Any, default: str) -> str:
    """A reason from a record: text only, valid UTF-8, bounded."""
    return valid_text(value)[:REASON_LIMIT] if isinstance(value, str) and value else default


def _on_test_frame(log: SessionLog, frame: bytes, checker: _Peer) -> None:
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


def _on_checker_frame(log: SessionLog, frame: bytes) -> None:
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


def _converse(log: SessionLog, test: _Peer, checker: _Peer, deadline: float) -> None:
    while not log.settled():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            log.timed_out = True
            return
        watched = [peer.sock for peer, closed in ((test, log.test_closed), (checker, log.checker_closed)) if not closed]
        if not watched:
            return
        readable, _, _ = select.select(watched, [], [], min(remaining, 1.0))
        for sock in readable:
            peer = test if sock is test.sock else checker
            try:
                frames = peer.receive()
            except ValueError as error:
                if peer is test:
                    log.tamper = log.tamper or f"the test process sent {error}"
                else:
                    log.checker_stopped(f"sent {error}")
                return
            if frames is None:
                if peer is test:
                    log.test_closed = True
                else:
                    log.checker_closed = True
                    if not log.settled() or log.first_unjudged() < len(log.forwarded):
                        log.checker_stopped("ended")
                continue
            for frame in frames:
                if peer is test:
                    _on_test_frame(log, frame, checker)
                else:
                    _on_checker_frame(log, frame)


@dataclass
class _Process:
    """One started process of a step: its handle and its bounded output readers."""

    launched: Launched
    readers: list[BoundedReader]

    def stop(self) -> None:
        kill_group(self.launched.pid)
        live_processes.unregister(self.launched.pid)

    def output(self) -> list[str]:
        for reader in self.readers:
            reader.join(timeout=2.0)
        return [reader.text() for reader in self.readers]


def _start(
    role: Role, job: StepJob, channel: socket.socket, scratch: Any, env: dict[str, str], output_limit: int, streams: int
) -> _Process:
    """Launch `role` with `streams` output pipes (1: stdout and stderr together, 2: separate)."""
    pipes = [os.pipe() for _ in range(streams)]
    writers = [write for _, write in pipes] * (2 // streams)
    try:
        launched = launch(
            role,
            job.python_binary,
            channel.fileno(),
            writers[0],
            writers[1],
            scratch,
            env,
            job.memory_mb,
            use_zygote=job.use_zygote,
            scratch_limit_mb=job.scratch_limit_mb,
        )
    except LaunchError:
        for read, write in pipes:
            os.close(read)
            os.close(write)
        raise
    finally:
        channel.close()
    for _, write in pipes:
        os.close(write)
    readers = [BoundedReader(os.fdopen(read, "rb", buffering=0), output_limit) for read, _ in pipes]
    for reader in readers:
        reader.start()
    return _Process(launched, readers)


def execute_step(job: StepJob) -> StepVerdict:
    """Run `job`'s test process and checker, and judge it."""
    log = SessionLog(total=len(job.tests))
    started = time.monotonic()
    test_process = checker_process = None
    returncode: int | None = None
    with ScratchDir(None, SCRATCH_PREFIX) as scratch:
        env = scrubbed_environment(home=scratch)
        test_end, test_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        checker_end, checker_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                checker_process = _start("checker", job, checker_child, scratch, env, CHECKER_ERROR_LIMIT, 1)
                test_process = _start("test", job, test_child, scratch, env, OUTPUT_LIMIT_BYTES, 2)
            except LaunchError as error:
                return StepVerdict(
                    job.step_id, "eval_error", f"could not start the test process: {error}", tests_total=len(job.tests)
                )
            checker = _Peer(checker_end, MAX_VALUES_FRAME_BYTES)
            test = _Peer(test_end, MAX_VALUES_FRAME_BYTES)
            checker.send(json.dumps(job.checker_spec()).encode("utf-8"))
            checker.send(pickle.dumps(list(job.target_pickles), protocol=PICKLE_PROTOCOL))
            test.send(json.dumps(job.test_spec()).encode("utf-8"))
            deadline = started + job.timeout_seconds
            _converse(log, test, checker, deadline)
            if log.timed_out or log.first_failed_check() or log.tamper or log.checker_error or log.checker_failure:
                test_process.stop()
            remaining = max(deadline - time.monotonic(), 0.0)
            returncode = test_process.launched.wait(min(remaining, EXIT_GRACE_SECONDS))
            if returncode is None and not log.timed_out and time.monotonic() >= deadline and not log.settled():
                log.timed_out = True
            test_process.stop()
            if returncode is None:
                returncode = test_process.launched.wait(EXIT_GRACE_SECONDS)
        finally:
            test_end.close()
            checker_end.close()
            for process in (test_process, checker_process):
                if process is not None:
                    process.stop()
    duration = time.monotonic() - started
    stdout, stderr = test_process.output() if test_process else ("", "")
    if (log.checker_error or log.checker_failure) and checker_process is not None:
        stderr += "\n[checker] " + checker_process.output()[0]
    status, reason = decide(log, returncode, job.timeout_seconds)
    return StepVerdict(
        step_id=job.step_id,
        status=status,
        reason=valid_text(reason),
        tests_total=len(job.tests),
        tests_passed=len(log.passed),
        returncode=returncode,
        stdout=valid_text(stdout),
        stderr=valid_text(stderr),
        duration_s=duration,
        launch_mode=test_process.launched.mode if test_process else "",
        compared=log.deciding_comparison(reason) if status == "fail" else None,
    )


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
