"""Running one step: starting the untrusted test process and the trusted checker, forwarding their frames.

`execute_step(job)` creates a scratch folder and starts two processes (zygote forks, or fresh ones):

* the **test process** (`test_process/runner.py`, confined: PID 1 of new namespaces, a size-limited tmpfs
  scratch, Landlock, no capabilities, seccomp, memory limit, scrubbed environment) runs the code and each test
  cell's model side, and sends the values the tests compare (plain data, `shared/wire.py`); it never receives a
  target;
* the **checker** (`checker/checker.py`, never runs model code) receives the step's targets and every test's
  comparison statements, and judges each test from the values the engine forwards to it.

The engine forwards values frame by frame without decoding them, stops at the first failed test,
enforces the timeout by killing the test process's group (its namespace goes with it), collects bounded
stdout/stderr, and returns a `StepVerdict`. What each frame means and what verdict the session makes are the
trusted side's rules (`stages.score.checker.verdict_rules`); this module only moves bytes and processes.
"""

from __future__ import annotations

import json
import os
import pickle
import select
import socket
import time
from dataclasses import dataclass
from typing import Any

from stages.execution import live_processes
from stages.execution.isolation import DEFAULT_OUTPUT_LIMIT, BoundedReader, ScratchDir, scrubbed_environment
from stages.execution.untrusted import valid_text
from stages.records.verdict import StepVerdict
from stages.score.checker.rewrite import RewrittenTest, checker_scope
from stages.score.checker.verdict_rules import SessionLog, decide, on_checker_frame, on_test_frame
from stages.score.parent.launcher import Launched, LaunchError, LaunchSpec, Role, kill_group, launch
from stages.score.parent.limits import StepLimits
from stages.score.shared import child_runtime
from stages.storage.json_values import JSONObject

OUTPUT_LIMIT_BYTES = DEFAULT_OUTPUT_LIMIT
CHECKER_ERROR_LIMIT = 8 * 1024
MAX_VALUES_FRAME_BYTES = 1 << 30
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
    limits: StepLimits
    targets_file: str | None
    use_zygote: bool = True

    def test_spec(self) -> JSONObject:
        """What the test process receives: code and each cell's model side; no target, no comparison."""
        return {
            "protocol": PROTOCOL_VERSION,
            "step_id": self.step_id,
            "deps": self.deps,
            "sections": [{"label": label, "code": code} for label, code in self.sections],
            "tests": [{"index": t.index, "prefetch": t.prefetch} for t in self.tests],
            "modules": list(self.modules),
        }

    def checker_spec(self) -> JSONObject:
        """What the checker receives: what it runs of the dependencies and each test's comparisons (targets
        follow)."""
        return {
            "protocol": PROTOCOL_VERSION,
            "step_id": self.step_id,
            "deps": checker_scope(self.deps).program,
            "tests": [{"index": t.index, "check": t.check, "temps": list(t.temps)} for t in self.tests],
        }


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
                    on_test_frame(log, frame, checker)
                else:
                    on_checker_frame(log, frame)


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
            LaunchSpec(
                role,
                job.limits.python_binary,
                channel.fileno(),
                writers[0],
                writers[1],
                scratch,
                env,
                job.limits.memory_mb,
                job.limits.scratch_limit_mb,
            ),
            use_zygote=job.use_zygote,
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
            deadline = started + job.limits.timeout_seconds
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
    status, reason = decide(log, returncode, job.limits.timeout_seconds)
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
