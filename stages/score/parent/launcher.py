"""Starting test processes: forked from a warm zygote per interpreter, or fresh as a fallback.

Both give a `Launched` handle: the child's pid (= its process group id: every child starts a new
session), and `wait(timeout)` for its exit code. One zygote per `python_binary` is shared by every
thread of the process (doit runs `score:<id>` tasks in threads); when it cannot start or dies, steps
run as fresh `python test_process/runner.py` and `python checker/checker.py` processes.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from stages.execution import live_processes
from stages.execution.confinement import binding_arguments
from stages.execution.isolation import scrubbed_environment
from stages.execution.spawning import popen_dying_with_this_process
from stages.score.shared import child_runtime

PROGRAMS = {
    "test": Path(child_runtime.TEST_PROCESS_DIR) / "runner.py",
    "checker": Path(child_runtime.CHECKER_DIR) / "checker.py",
}
ZYGOTE = Path(child_runtime.HERE) / "zygote.py"
READY_TIMEOUT_SECONDS = 120.0
SPAWN_TIMEOUT_SECONDS = 60.0
MAX_MESSAGE = 1 << 20

LaunchMode = Literal["zygote", "fresh"]
Role = Literal["test", "checker"]


class LaunchError(RuntimeError):
    """A test process could not be started."""


@dataclass(frozen=True)
class LaunchSpec:
    """One process to start: its role, interpreter, descriptors (the channel, stdout, stderr), working folder,
    environment and limits (memory; the scratch tmpfs of a test process; the CPU time of a checker)."""

    role: Role
    python_binary: str
    channel_fd: int
    stdout_fd: int
    stderr_fd: int
    cwd: Path
    env: Mapping[str, str]
    memory_mb: int | None
    scratch_limit_mb: int | None = None
    cpu_seconds: int | None = None


@dataclass
class Launched:
    pid: int
    mode: LaunchMode
    wait: Callable[[float | None], int | None]


def kill_group(pid: int) -> None:
    """SIGKILL the whole process group of `pid` (and `pid` itself, should it not lead one yet)."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@dataclass(frozen=True)
class _SpawnReply:
    """The zygote's answer to a spawn request: the pid it forked, or (None) why it could not."""

    pid: int | None
    error: str


class ZygoteClient:
    """The engine's side of one zygote."""

    def __init__(self, python_binary: str) -> None:
        self.python_binary = python_binary
        self.alive = False
        self.versions: dict[str, str] = {}
        self._send_lock = threading.Lock()
        self._state = threading.Condition()
        self._spawned: dict[int, _SpawnReply] = {}
        self._exits: dict[int, int | None] = {}
        self._spares: set[int] = set()
        self._ids = itertools.count(1)
        self._process: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None

    def start(self) -> None:
        engine_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._process = popen_dying_with_this_process(
                [self.python_binary, str(ZYGOTE), str(zygote_end.fileno()), *binding_arguments()[1:]],
                pass_fds=(zygote_end.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=scrubbed_environment(),
                start_new_session=True,
                close_fds=True,
            )
        except OSError as error:
            engine_end.close()
            raise LaunchError(f"cannot start the zygote with {self.python_binary}: {error}") from None
        finally:
            zygote_end.close()
        live_processes.register(self._process.pid)  # stopped at once by a Ctrl-C / SIGTERM
        self._control = engine_end
        engine_end.settimeout(READY_TIMEOUT_SECONDS)
        try:
            ready = json.loads(engine_end.recv(MAX_MESSAGE).decode("utf-8"))
        except (OSError, ValueError) as error:
            self.stop()
            raise LaunchError(f"the zygote did not start: {error}") from None
        if ready.get("op") != "ready":
            self.stop()
            raise LaunchError("the zygote did not report ready")
        engine_end.settimeout(None)
        self.versions = dict(ready.get("versions") or {})
        self.alive = True
        threading.Thread(target=self._read_loop, name="zygote-reader", daemon=True).start()

    def _read_loop(self) -> None:
        assert self._control is not None
        while True:
            try:
                message = self._control.recv(MAX_MESSAGE)
            except OSError:
                message = b""
            if not message:
                break
            record = json.loads(message.decode("utf-8"))
            with self._state:
                self._take(record)
                self._state.notify_all()
        with self._state:
            self.alive = False
            self._state.notify_all()

    def _take(self, record: dict[str, Any]) -> None:
        """One message of the zygote. Its spares, forked before their step, are stopped with the run like any
        step's process: they are registered as they are made and unregistered once gone unused."""
        op = record.get("op")
        if op == "spare":
            self._spares.add(int(record["pid"]))
            live_processes.register(int(record["pid"]))
        elif op in ("spawned", "spawn_failed"):
            pid = int(record["pid"]) if op == "spawned" else None
            if pid is not None:
                self._spares.discard(pid)
            self._spawned[int(record["id"])] = _SpawnReply(pid, str(record.get("error")))
        elif op == "exited":
            pid = int(record["pid"])
            if pid in self._spares:
                self._spares.discard(pid)
                live_processes.unregister(pid)
            else:
                self._exits[pid] = int(record["returncode"])

    def launch(self, spec: LaunchSpec) -> Launched:
        """Fork `spec`'s process from this zygote (whose interpreter is `spec.python_binary`)."""
        if not self.alive or self._control is None:
            raise LaunchError("the zygote is not running")
        request_id = next(self._ids)
        request = {
            "op": "spawn",
            "id": request_id,
            "role": spec.role,
            "cwd": str(spec.cwd),
            "env": dict(spec.env),
            "memory_mb": spec.memory_mb,
            "scratch_limit_mb": spec.scratch_limit_mb,
            "cpu_seconds": spec.cpu_seconds,
        }
        try:
            with self._send_lock:
                socket.send_fds(
                    self._control,
                    [json.dumps(request).encode("utf-8")],
                    [spec.stdout_fd, spec.stderr_fd, spec.channel_fd],
                )
        except OSError as error:
            raise LaunchError(f"cannot reach the zygote: {error}") from None
        deadline = time.monotonic() + SPAWN_TIMEOUT_SECONDS
        with self._state:
            while request_id not in self._spawned:
                remaining = deadline - time.monotonic()
                if not self.alive or remaining <= 0:
                    raise LaunchError("the zygote stopped answering")
                self._state.wait(remaining)
            reply = self._spawned.pop(request_id)
        if reply.pid is None:
            raise LaunchError(f"the zygote could not fork: {reply.error}")
        pid = reply.pid
        live_processes.register(pid)  # stopped at once by a Ctrl-C / SIGTERM; the engine unregisters it when reaped
        return Launched(pid=pid, mode="zygote", wait=functools.partial(self._wait, pid))

    def _wait(self, pid: int, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._state:
            while pid not in self._exits:
                if not self.alive:
                    return None
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._state.wait(remaining)
            return self._exits.pop(pid)

    def stop(self) -> None:
        self.alive = False
        if self._control is not None:
            try:
                self._control.close()
            except OSError:
                pass
        with self._state:
            spares, self._spares = set(self._spares), set()
        for pid in spares:
            kill_group(pid)
            live_processes.unregister(pid)
        if self._process is not None:
            kill_group(self._process.pid)
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            live_processes.unregister(self._process.pid)


def launch_fresh(spec: LaunchSpec) -> Launched:
    """A fresh interpreter running the test process or the checker (each confines itself)."""
    scratch = ["--scratch-limit-mb", str(spec.scratch_limit_mb or 0)] if spec.role == "test" else []
    cpu = ["--cpu-seconds", str(spec.cpu_seconds)] if spec.role == "checker" and spec.cpu_seconds else []
    try:
        process = popen_dying_with_this_process(
            [
                spec.python_binary,
                str(PROGRAMS[spec.role]),
                "--channel-fd",
                str(spec.channel_fd),
                "--memory-mb",
                str(spec.memory_mb or 0),
                *scratch,
                *cpu,
                *binding_arguments(),
            ],
            pass_fds=(spec.channel_fd,),
            stdin=subprocess.DEVNULL,
            stdout=spec.stdout_fd,
            stderr=spec.stderr_fd,
            cwd=spec.cwd,
            env=dict(spec.env),
            start_new_session=True,
            close_fds=True,
        )
    except OSError as error:
        raise LaunchError(f"cannot start {spec.python_binary}: {error}") from None
    live_processes.register(process.pid)  # stopped at once by a Ctrl-C / SIGTERM; the engine unregisters it when reaped

    def wait(timeout: float | None) -> int | None:
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    return Launched(pid=process.pid, mode="fresh", wait=wait)


_ZYGOTES: dict[str, ZygoteClient | None] = {}
_ZYGOTES_LOCK = threading.Lock()


def zygote_for(python_binary: str) -> ZygoteClient | None:
    """The shared zygote of `python_binary`, started on first use; None when it cannot run."""
    with _ZYGOTES_LOCK:
        client = _ZYGOTES.get(python_binary)
        if client is not None and client.alive:
            return client
        if python_binary in _ZYGOTES and client is None:
            return None
        if client is not None and not client.alive:
            # It died: fall back to fresh processes for the rest of this process's life.
            _ZYGOTES[python_binary] = None
            return None
        client = ZygoteClient(python_binary)
        try:
            client.start()
        except LaunchError:
            _ZYGOTES[python_binary] = None
            return None
        _ZYGOTES[python_binary] = client
        return client


def start_zygote_in_background(python_binary: str) -> None:
    """Start the zygote of `python_binary` in a daemon thread, once per process: a streaming run starts it while
    the model answers, so its first test does not wait seconds for the zygote's imports. Never blocks: the
    zygote's own lock is held while it starts."""
    with _STARTED_IN_BACKGROUND_LOCK:
        if python_binary in _STARTED_IN_BACKGROUND:
            return
        _STARTED_IN_BACKGROUND.add(python_binary)
    threading.Thread(target=zygote_for, args=(python_binary,), name="zygote-start", daemon=True).start()


_STARTED_IN_BACKGROUND: set[str] = set()
_STARTED_IN_BACKGROUND_LOCK = threading.Lock()


def stop_zygotes() -> None:
    with _ZYGOTES_LOCK:
        for client in _ZYGOTES.values():
            if client is not None:
                client.stop()
        _ZYGOTES.clear()


atexit.register(stop_zygotes)


def launch(spec: LaunchSpec, *, use_zygote: bool = True) -> Launched:
    """Fork from the zygote when possible, else start a fresh process. A test process's scratch folder
    (`spec.cwd`) becomes a tmpfs of `spec.scratch_limit_mb` MiB inside its namespaces."""
    if use_zygote:
        client = zygote_for(spec.python_binary)
        if client is not None:
            try:
                return client.launch(spec)
            except LaunchError:
                pass
    return launch_fresh(spec)


def environment_versions(python_binary: str) -> dict[str, str]:
    """Interpreter and library versions of `python_binary` (from its zygote, else a one-off process)."""
    client = zygote_for(python_binary)
    if client is not None and client.versions:
        return dict(client.versions)
    return _versions_by_subprocess(python_binary)


_VERSIONS: dict[str, dict[str, str]] = {}


def _versions_by_subprocess(python_binary: str) -> dict[str, str]:
    if python_binary not in _VERSIONS:
        code = (
            f"import sys; sys.path.insert(0, {child_runtime.HERE!r}); import json, child_runtime; "
            "print(json.dumps(child_runtime.running_interpreter_versions()))"
        )
        result = subprocess.run(
            [python_binary, "-c", code], capture_output=True, env=scrubbed_environment(), timeout=300, check=False
        )
        if result.returncode != 0:
            raise LaunchError(f"cannot run {python_binary}: {result.stderr.decode('utf-8', 'replace').strip()[-200:]}")
        _VERSIONS[python_binary] = json.loads(result.stdout.decode("utf-8"))
    return dict(_VERSIONS[python_binary])
