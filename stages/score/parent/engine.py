"""Running one step: starting the untrusted test process and the trusted checker, forwarding their frames.

`execute_step(job)` creates a scratch folder and starts two processes (zygote forks, or fresh ones):

* the **test process** (`test_process/runner.py`, confined: PID 1 of new namespaces, a size-limited tmpfs
  scratch, Landlock, no capabilities, seccomp, memory limit, scrubbed environment) runs the code and each test
  cell's model side, and sends the values the tests compare (plain data, `shared/wire.py`); it never receives a
  target;
* the **checker** (`checker/checker.py`, never runs model code) receives the step's targets and every test's
  comparison statements, and judges each test from the values the engine forwards to it.

The engine forwards values frame by frame without decoding them (each read into one buffer, at most the step's
memory), never waits past the step's deadline (both channels are non-blocking and polled; what it sends is queued),
stops at the first failed test, enforces the timeout by killing the test process's group (its namespace goes with
it) and the checker, collects bounded stdout/stderr, and returns a `StepVerdict`. What each frame means and what verdict the session makes (or a
launch that failed) are the trusted side's rules (`stages.score.checker.verdict_rules`); this module only moves bytes
and processes.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import pickle
import select
import socket
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from stages.execution import live_processes
from stages.execution.isolation import DEFAULT_OUTPUT_LIMIT, BoundedReader, ScratchDir, scrubbed_environment
from stages.records.verdict import StepVerdict
from stages.score.checker.rewrite import RewrittenTest, checker_scope
from stages.score.checker.verdict_rules import (
    CHECKER_RECORD_BYTES,
    Frame,
    SessionLog,
    SessionOutput,
    judged_verdict,
    not_started,
    on_checker_frame,
    on_test_frame,
)
from stages.score.parent.launcher import Launched, LaunchError, LaunchSpec, Role, kill_group, launch
from stages.score.parent.limits import StepLimits
from stages.score.shared import child_runtime
from stages.storage.json_values import JSONObject

OUTPUT_LIMIT_BYTES = DEFAULT_OUTPUT_LIMIT
CHECKER_ERROR_LIMIT = 8 * 1024
MIB = 1 << 20
MAX_VALUES_FRAME_BYTES = 1 << 30  # a values frame is at most the step's memory limit, and never more than this
LARGE_FRAME_BYTES = 1 << 20  # frames from this size up are read into an anonymous mapping
POLL_SECONDS = 1.0
CHECKER_CPU_GRACE_SECONDS = 5
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
    """One socket of the engine, non-blocking: frames in (bounded, each read into one buffer of its announced size),
    frames out (queued, written as the socket takes them). Nothing here waits: the conversation polls both
    sockets up to the step's deadline."""

    def __init__(self, sock: socket.socket, limit: int) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.limit = limit
        self._header = bytearray()
        self._frame: Frame | None = None
        self._filled = 0
        self._outbox: deque[memoryview] = deque()
        self.broken = False  # a write failed: the other side stopped reading

    # -- out ------------------------------------------------------------------------------------------------
    def send(self, payload: Frame) -> bool:
        """Queue one frame and write what the socket takes now; False once the other side stopped reading."""
        if self.broken:
            return False
        self._outbox.append(memoryview(len(payload).to_bytes(child_runtime.HEADER_BYTES, "big")))
        self._outbox.append(memoryview(payload))
        self.flush()
        return not self.broken

    def pending(self) -> bool:
        """Bytes queued that the socket has not taken yet."""
        return bool(self._outbox)

    def flush(self) -> None:
        """Write queued bytes until the socket would block."""
        while self._outbox and not self.broken:
            try:
                written = self.sock.send(self._outbox[0])
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.broken = True
                self._outbox.clear()
                return
            if written == len(self._outbox[0]):
                self._outbox.popleft()
            else:
                self._outbox[0] = self._outbox[0][written:]

    # -- in -------------------------------------------------------------------------------------------------
    def receive(self) -> list[Frame] | None:
        """The next frame once it is complete ([] while it is not); None at the end of the stream. ValueError
        for a frame announced longer than `limit` (before anything of it is held)."""
        while True:
            if self._frame is None:
                wanted = child_runtime.HEADER_BYTES - len(self._header)
                chunk = self._recv(wanted)
                if chunk is None:
                    return []
                if not chunk:
                    return None
                self._header.extend(chunk)
                if len(self._header) < child_runtime.HEADER_BYTES:
                    continue
                self._frame = self._start_frame(int.from_bytes(self._header, "big"))
                self._header.clear()
                self._filled = 0
            if self._filled < len(self._frame):
                count = self._recv_into(memoryview(self._frame)[self._filled :])
                if count is None:
                    return []
                if count == 0:
                    return None
                self._filled += count
                continue
            frame, self._frame = self._frame, None
            return [frame]

    def _start_frame(self, size: int) -> Frame:
        if size > self.limit:
            raise ValueError(f"a frame of {size} bytes (the limit is {self.limit})")
        return frame_buffer(size)

    def _recv(self, count: int) -> bytes | None:
        """At most `count` bytes; None when none is there yet, b"" at the end of the stream (or a broken one)."""
        try:
            return self.sock.recv(count)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            return b""

    def _recv_into(self, view: memoryview) -> int | None:
        try:
            return self.sock.recv_into(view)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            return 0


def checker_cpu_seconds(timeout_seconds: float) -> int:
    """The checker's CPU-time limit: the step's timeout on every CPU of this machine (its numeric libraries may
    run threads), plus a grace; the engine kills it with the step sooner, this holds should the engine be gone."""
    return math.ceil(timeout_seconds) * (os.cpu_count() or 1) + CHECKER_CPU_GRACE_SECONDS


def frame_buffer(size: int) -> Frame:
    """A buffer for a frame of `size` bytes: a large one is an anonymous mapping, whose pages are only held once
    written (a frame announced but never sent costs nothing), a small one a bytearray."""
    if size < LARGE_FRAME_BYTES:
        return bytearray(size)
    return mmap.mmap(-1, size)


def values_frame_limit(memory_mb: int | None) -> int:
    """The largest values frame of a step: what its test process may hold (`step_memory_mb`), at most
    `MAX_VALUES_FRAME_BYTES`."""
    return min(memory_mb * MIB, MAX_VALUES_FRAME_BYTES) if memory_mb else MAX_VALUES_FRAME_BYTES


def _watched(log: SessionLog, test: _Peer, checker: _Peer) -> dict[int, tuple[_Peer, int]]:
    """The sockets to poll and for what: the test process is read only while the checker has taken every byte
    forwarded to it (a busy checker holds the values back in the test process, not here), the checker is read
    while open, and each is written while bytes are queued for it."""
    watched: dict[int, tuple[_Peer, int]] = {}
    for peer, closed in ((test, log.test_closed), (checker, log.checker_closed)):
        events = 0
        if not closed and not (peer is test and checker.pending()):
            events |= select.POLLIN
        if peer.pending():
            events |= select.POLLOUT
        if events:
            watched[peer.sock.fileno()] = (peer, events)
    return watched


def _take_frames(log: SessionLog, peer: _Peer, test: _Peer, checker: _Peer) -> bool:
    """Read what `peer` sent; False when the conversation is over (an oversized frame)."""
    try:
        frames = peer.receive()
    except ValueError as error:
        if peer is test:
            log.tamper = log.tamper or f"the test process sent {error}"
        else:
            log.checker_stopped(f"sent {error}")
        return False
    if frames is None:
        if peer is test:
            log.test_closed = True
        else:
            log.checker_closed = True
            if not log.settled() or log.first_unjudged() < len(log.forwarded):
                log.checker_stopped("ended")
        return True
    for frame in frames:
        if peer is test:
            on_test_frame(log, frame, checker)
        else:
            on_checker_frame(log, frame)
    return True


def _converse(log: SessionLog, test: _Peer, checker: _Peer, deadline: float) -> None:
    """Relay frames until the verdict is settled or the deadline passes; every wait is bounded by the deadline."""
    poller = select.poll()
    while not log.settled():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            log.timed_out = True
            return
        watched = _watched(log, test, checker)
        if not watched:
            return
        for fd, (_, events) in watched.items():
            poller.register(fd, events)
        try:
            ready = poller.poll(max(1, int(min(remaining, POLL_SECONDS) * 1000)))
        finally:
            for fd in watched:
                poller.unregister(fd)
        for fd, events in ready:
            peer, wanted = watched[fd]
            if wanted & select.POLLOUT:
                _flush(log, peer, checker)
            if wanted & select.POLLIN and events & (select.POLLIN | select.POLLHUP | select.POLLERR):
                if not _take_frames(log, peer, test, checker):
                    return


def _flush(log: SessionLog, peer: _Peer, checker: _Peer) -> None:
    """Write what is queued for `peer`; a checker that stopped reading what it was sent fails like one that ended."""
    peer.flush()
    if peer is checker and checker.broken and not log.checker_closed:
        log.checker_closed = True
        log.checker_stopped("stopped reading")


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
                checker_cpu_seconds(job.limits.timeout_seconds) if role == "checker" else None,
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
                return not_started(job.step_id, len(job.tests), str(error))
            checker = _Peer(checker_end, CHECKER_RECORD_BYTES)
            test = _Peer(test_end, values_frame_limit(job.limits.memory_mb))
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
    launch_mode = test_process.launched.mode if test_process else ""
    return judged_verdict(
        job.step_id, log, returncode, job.limits.timeout_seconds, SessionOutput(stdout, stderr, duration, launch_mode)
    )
