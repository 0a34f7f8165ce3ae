"""Running one step's tests in an isolated test process and turning what happened into a verdict.

`execute_step(job)` creates a scratch folder, a socket pair (the harness channel) and two output
pipes, starts the harness (zygote fork or fresh process), sends the job, serves each test's target at
most once and only to requests carrying the per-run nonce, enforces the timeout by killing the
process group, collects bounded stdout/stderr, and returns a `StepVerdict`.

Verdict rules (`decide`): a message without the nonce or a malformed frame is tampering (`fail`); a
second request for a target is a theft (`fail`, "targets read outside the test harness"); a timeout
is `timeout`; a failure record from the harness gives its reason; `pass` needs the completion record,
every test reported passed, and exit code 0; a process that ends without a completion record fails
("exited early" / "killed by signal").
"""
from __future__ import annotations

import json
import os
import secrets
import select
import signal
import socket
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from stages import live_processes
from stages.isolation import DEFAULT_OUTPUT_LIMIT, BoundedReader, ScratchDir, scrubbed_environment
from stages.score import harness as harness_module
from stages.score.launcher import LaunchError, Launched, kill_group, launch
from stages.score.rewrite import RewrittenTest

StepStatus = Literal["pass", "fail", "timeout", "parse_error", "eval_error", "skipped"]
OUTPUT_LIMIT_BYTES = DEFAULT_OUTPUT_LIMIT
EXIT_GRACE_SECONDS = 10.0
SCRATCH_PREFIX = "scicode-step-"


@dataclass(frozen=True)
class StepVerdict:
    step_id: str
    status: StepStatus
    reason: str
    tests_total: int = 0
    tests_passed: int = 0
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    cached: bool = False
    launch_mode: str = ""
    executed_on: str = ""  # the dask worker that ran the test process ("" when run by this process)

    @property
    def correct(self) -> bool:
        return self.status == "pass"

    def as_record(self) -> dict[str, Any]:
        record = {
            "step_id": self.step_id, "status": self.status, "correct": self.correct,
            "tests": {"total": self.tests_total, "passed": self.tests_passed},
            "returncode": self.returncode, "stdout": self.stdout, "stderr": self.stderr,
            "duration_s": round(self.duration_s, 3), "reason": self.reason, "cached": self.cached,
        }
        if self.executed_on:
            record["executed_on"] = self.executed_on
        return record

    def to_cache(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_cache(cls, record: dict[str, Any]) -> "StepVerdict":
        known = {name: record[name] for name in cls.__dataclass_fields__ if name in record}
        return cls(**{**known, "cached": True})


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

    def spec(self, nonce: str) -> dict[str, Any]:
        return {
            "protocol": harness_module.PROTOCOL_VERSION, "nonce": nonce, "step_id": self.step_id, "deps": self.deps,
            "sections": [{"label": label, "code": code} for label, code in self.sections],
            "tests": [
                {"index": t.index, "prefetch": t.prefetch, "residual": t.residual, "temps": list(t.temps),
                 "callee_temps": list(t.callee_temps), "assigned_names": list(t.assigned_names)}
                for t in self.tests
            ],
            "modules": list(self.modules), "targets_file": self.targets_file,
        }


@dataclass
class SessionLog:
    """What the engine saw on the harness channel."""

    passed: set[int] = field(default_factory=set)
    served: set[int] = field(default_factory=set)
    complete: bool = False
    failure: dict[str, Any] | None = None
    tamper: str | None = None
    theft: str | None = None
    timed_out: bool = False


class _Channel:
    def __init__(self, sock: socket.socket, nonce: str, pickles: tuple[bytes, ...], log: SessionLog) -> None:
        self.sock = sock
        self.nonce = nonce
        self.pickles = pickles
        self.log = log
        self.buffer = bytearray()

    def send(self, payload: bytes) -> None:
        try:
            self.sock.sendall(len(payload).to_bytes(harness_module.HEADER_BYTES, "big") + payload)
        except OSError:
            pass

    def frames(self) -> list[bytes]:
        found = []
        header = harness_module.HEADER_BYTES
        while len(self.buffer) >= header:
            size = int.from_bytes(self.buffer[:header], "big")
            if size > harness_module.MAX_FRAME_BYTES:
                self.log.tamper = self.log.tamper or "a malformed frame arrived on the harness channel"
                self.buffer.clear()
                break
            if len(self.buffer) < header + size:
                break
            found.append(bytes(self.buffer[header:header + size]))
            del self.buffer[:header + size]
        return found

    def handle(self, frame: bytes) -> None:
        try:
            record = json.loads(frame.decode("utf-8"))
            if not isinstance(record, dict):
                raise ValueError
        except ValueError:
            self.log.tamper = self.log.tamper or "a malformed message arrived on the harness channel"
            return
        if not secrets.compare_digest(str(record.get("nonce", "")), self.nonce):
            if record.get("type") == "fetch":
                self.log.tamper = self.log.tamper or (
                    "targets read outside the test harness: a target request without the harness nonce "
                    "(code under test wrote to the harness channel); refused")
            else:
                self.log.tamper = self.log.tamper or (
                    "a message without the harness nonce arrived on the harness channel (code under test wrote to it)")
            self.send(b"Rrefused")
            return
        kind = record.get("type")
        test = record.get("test")
        if kind == "fetch":
            self._serve(test)
        elif kind == "test_passed" and isinstance(test, int):
            self.log.passed.add(test)
        elif kind == "complete":
            self.log.complete = True
        elif self.log.failure is None:
            self.log.failure = record

    def _serve(self, test: Any) -> None:
        if not isinstance(test, int) or not 0 <= test < len(self.pickles):
            self.log.theft = self.log.theft or f"a target outside the step's tests was requested ({test!r})"
            self.send(b"Rno such test")
        elif test in self.log.served:
            self.log.theft = self.log.theft or f"targets read outside the test harness (test {test + 1}'s target was requested twice)"
            self.send(b"Rtargets read outside the test harness")
        else:
            self.log.served.add(test)
            self.send(b"T" + self.pickles[test])


def _converse(channel: _Channel, deadline: float) -> None:
    sock = channel.sock
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            channel.log.timed_out = True
            return
        readable, _, _ = select.select([sock], [], [], min(remaining, 1.0))
        if not readable:
            continue
        try:
            chunk = sock.recv(1 << 20)
        except OSError:
            chunk = b""
        if not chunk:
            return
        channel.buffer.extend(chunk)
        for frame in channel.frames():
            channel.handle(frame)


def execute_step(job: StepJob) -> StepVerdict:
    """Run `job` in a fresh isolated test process and judge it."""
    nonce = secrets.token_hex(32)
    log = SessionLog()
    engine_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    started = time.monotonic()
    launched: Launched | None = None
    returncode: int | None = None
    readers: list[BoundedReader] = []
    try:
        with ScratchDir(None, SCRATCH_PREFIX) as scratch:
            env = scrubbed_environment(home=scratch)
            try:
                launched = launch(job.python_binary, child_end.fileno(), out_write, err_write, scratch, env,
                                  job.memory_mb, use_zygote=job.use_zygote)
            except LaunchError as error:
                return StepVerdict(job.step_id, "eval_error", f"could not start the test process: {error}",
                                   tests_total=len(job.tests))
            finally:
                child_end.close()
                os.close(out_write)
                os.close(err_write)
            readers = [BoundedReader(os.fdopen(out_read, "rb", buffering=0), OUTPUT_LIMIT_BYTES),
                       BoundedReader(os.fdopen(err_read, "rb", buffering=0), OUTPUT_LIMIT_BYTES)]
            out_read = err_read = -1
            for reader in readers:
                reader.start()
            channel = _Channel(engine_end, nonce, job.target_pickles, log)
            channel.send(json.dumps(job.spec(nonce)).encode("utf-8"))
            deadline = started + job.timeout_seconds
            _converse(channel, deadline)
            if log.timed_out:
                kill_group(launched.pid)
            remaining = max(deadline - time.monotonic(), 0.0)
            returncode = launched.wait(min(remaining, EXIT_GRACE_SECONDS) if not log.timed_out else EXIT_GRACE_SECONDS)
            if returncode is None and not log.timed_out and time.monotonic() >= deadline:
                log.timed_out = True
            kill_group(launched.pid)
            if returncode is None:
                returncode = launched.wait(EXIT_GRACE_SECONDS)
    finally:
        engine_end.close()
        for fd in (out_read, err_read):
            if fd >= 0:
                os.close(fd)
        if launched is not None:
            kill_group(launched.pid)
            live_processes.unregister(launched.pid)
    duration = time.monotonic() - started
    for reader in readers:
        reader.join(timeout=2.0)
    stdout, stderr = (readers[0].text(), readers[1].text()) if readers else ("", "")
    status, reason = decide(log, returncode, len(job.tests), job.timeout_seconds)
    return StepVerdict(
        step_id=job.step_id, status=status, reason=reason, tests_total=len(job.tests),
        tests_passed=len(log.passed), returncode=returncode, stdout=stdout, stderr=stderr,
        duration_s=duration, launch_mode=launched.mode if launched else "",
    )


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def decide(log: SessionLog, returncode: int | None, total: int, timeout_seconds: float) -> tuple[StepStatus, str]:
    """The verdict of one execution (see the module docstring)."""
    if log.tamper:
        return "fail", log.tamper
    if log.theft:
        return "fail", log.theft
    if log.timed_out:
        return "timeout", f"the tests did not finish within step_timeout_seconds={timeout_seconds:g} (process group killed)"
    if log.failure is not None:
        kind = str(log.failure.get("type"))
        reason = str(log.failure.get("reason") or kind)
        if kind == "refused":
            return "fail", "targets read outside the test harness"
        if kind in ("deps_error", "harness_error"):
            return "eval_error", reason
        return "fail", reason
    if log.complete:
        missing = [i + 1 for i in range(total) if i not in log.passed]
        if missing:
            return "fail", f"completion reported but tests {missing} never passed"
        if returncode != 0:
            return "fail", f"all tests passed but the process ended with code {returncode}"
        return "pass", f"all {total} tests passed"
    if returncode is None:
        return "eval_error", "the test process ended without an exit status (the zygote stopped)"
    done = f"after {len(log.passed)} of {total} tests"
    if returncode < 0:
        return "fail", f"the test process was killed by {_signal_name(returncode)} {done} (no completion record)"
    if returncode == 0:
        return "fail", f"the test process exited with code 0 {done} without a completion record (early exit is not a pass)"
    return "fail", f"the test process exited with code {returncode} {done} without a completion record"
