"""The warm interpreter (zygote): imports numpy/scipy/sympy once and forks the processes of every step.

Run by the engine as `python_binary zygote.py <control_fd> [<seccomp binding path>]` with a scrubbed
environment; it never sees targets or secrets. It loads the seccomp binding and builds the filter once, so every
child inherits them ready. Control messages are JSON over an AF_UNIX SOCK_SEQPACKET socket:

* engine -> zygote `{"op": "spawn", "id", "role", "cwd", "env", "memory_mb", "scratch_limit_mb", "cpu_seconds"}`
  (the checker's CPU-time limit) carrying three
  descriptors (stdout, stderr, channel) as SCM_RIGHTS; `role` is "test" (the untrusted test process,
  `test_process/runner.py`) or "checker" (`checker/checker.py`);
* zygote -> engine `{"op": "ready", "versions"}`, `{"op": "spare", "pid"}`, `{"op": "spawned", "id", "pid"}`,
  `{"op": "exited", "pid", "returncode"}`, `{"op": "spawn_failed", "id", "error"}`.

*Spares.* What a step's processes do before they know their step is done ahead of it: the zygote keeps
`SPARES_PER_ROLE` children of each role forked and waiting on a socket of their own (and forks more while no
request waits). Each has its own session (a process group the engine kills as a whole) and dies with the zygote.
A test spare is already the supervising parent (A) of its confined process (B): `confine.supervise` made the new
namespaces, and B has made its mount namespace private and set its task limit. A request is handed to a spare with
its descriptors; the spare moves to its scratch folder, takes them as fds 1/2/3, closes every other descriptor
(the spare's socket included) and replaces its environment. B then confines itself for the step (its scratch a
size-limited tmpfs, Landlock, the unprivileged ids, no capabilities, seccomp, memory limit) and runs the test
process; a checker spare confines itself and runs the checker. A tells the zygote how B ended before it exits
itself. Children always leave with `os._exit`. The zygote is a child subreaper: an orphan of a step reparented to
it is killed. When the engine goes away the zygote kills its children's groups and exits. It never runs model
code.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypedDict

CHANNEL_FD = 3
MAX_MESSAGE = 1 << 20


ROLES = ("test", "checker")
SPARES_PER_ROLE = 2  # forked ahead of their step, so that a step's start pays none of the set-up below
REFILL_QUIET_SECONDS = 0.01  # spares are forked once no request has come for this long (a step asks for two)


@dataclass
class Spare:
    """A child forked before its step is known, waiting on its own socket for the step's request and descriptors.

    A test spare has already become the supervising parent (A) of its confined process (B), which has made its
    mount namespace private and set its task limit; a checker spare has its own session. Neither has run anything
    of a step yet."""

    pid: int
    role: str
    sock: socket.socket


class SpawnRequest(TypedDict):
    """The engine's request for a step's process (`launcher.ZygoteClient.launch`, JSON), sent with the step's
    stdout, stderr and channel descriptors."""

    op: str
    id: int
    role: str
    cwd: str  # the step's scratch folder
    env: dict[str, str]
    memory_mb: int | None
    scratch_limit_mb: int | None
    cpu_seconds: int | None  # the checker's CPU-time limit


def _send(control: socket.socket, record: dict[str, object]) -> None:
    """A message to the engine (JSON)."""
    control.send(json.dumps(record).encode("utf-8"))


def _fork_spare(role: str, read_paths: list[str], inherited: list[socket.socket]) -> Spare:
    """Fork a spare of `role`; `inherited` are the zygote's sockets, which the child lets go of unclosed."""
    zygote_end, spare_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError:
        zygote_end.close()
        spare_end.close()
        raise
    if pid == 0:
        for sock in [*inherited, zygote_end]:
            sock.detach()  # their descriptors are closed below; the objects must never close a reused number
        _spare(role, spare_end, read_paths)
    spare_end.close()
    return Spare(pid, role, zygote_end)


def _spare(role: str, sock: socket.socket, read_paths: list[str]) -> None:
    code = 70
    try:
        os.setsid()
        _die_with_parent()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        keep = sock.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, _open_max())
        if role == "test":
            from child_runtime import confine_module

            confine = confine_module()
            code = confine.supervise(lambda: _serve_when_asked(role, sock, read_paths, confine.prepare_namespace))
            _report_exit(sock, code)
            confine.exit_like(code)
        else:
            code = _serve_when_asked(role, sock, read_paths, None)
    except BaseException:  # noqa: BLE001 - the child must never return into the zygote loop
        try:
            os.write(2, traceback.format_exc().encode("utf-8", "replace"))
        except OSError:
            pass
    finally:
        os._exit(code)


def _report_exit(sock: socket.socket, code: int) -> None:
    """The supervising parent tells the zygote how its confined process ended before it exits itself, so that the
    engine need not wait for this process's own teardown."""
    try:
        sock.send(json.dumps({"returncode": code}).encode("utf-8"))
    except OSError:
        pass  # the zygote is gone; it reaps nothing more


def _serve_when_asked(
    role: str, sock: socket.socket, read_paths: list[str], prepare: Callable[[], object] | None
) -> int:
    """Prepare what needs no step, wait for the step, take its descriptors and environment, then run the role."""
    if prepare is not None:
        prepare()
    # A batch task does not preempt the zygote when the step wakes it: the zygote answers the engine first, and
    # the step's set-up runs beside it on another CPU rather than in its place.
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except OSError:
        pass
    message, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 8)
    sock.close()
    if not message or len(fds) != 3:
        return 0  # the zygote went away, or let this spare go, before it had a step
    request: SpawnRequest = json.loads(message.decode("utf-8"))
    _take_step_descriptors(request, fds)
    return _run_role(role, request, read_paths)


def _open_max() -> int:
    return os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 4096


def _take_step_descriptors(request: SpawnRequest, fds: list[int]) -> None:
    """The step's scratch folder as working directory, its stdout/stderr/channel as fds 1/2/3 and nothing else
    open, its environment in place of the zygote's."""
    stdout_fd, stderr_fd, channel_fd = fds
    os.chdir(request["cwd"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(stdout_fd, 1)
    os.dup2(stderr_fd, 2)
    os.dup2(channel_fd, CHANNEL_FD)
    os.closerange(CHANNEL_FD + 1, _open_max())
    os.environ.clear()
    os.environ.update(request["env"])


def _die_with_parent() -> None:
    """SIGKILL this child when the zygote ends, however it ends (its test process's namespace goes too)."""
    from child_runtime import confine_module

    confine = confine_module()
    confine.kernel.load_libc().prctl(confine.kernel.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _run_role(role: str, request: SpawnRequest, read_paths: list[str]) -> int:
    import checker
    import runner

    memory_mb = request.get("memory_mb")
    if role == "checker":
        return int(checker.serve_confined(CHANNEL_FD, memory_mb, read_paths, request.get("cpu_seconds")))
    return int(
        runner.serve_confined(CHANNEL_FD, memory_mb, read_paths, request["cwd"], request.get("scratch_limit_mb"))
    )


def _signal_group(pids: Iterable[int]) -> None:
    for pid in pids:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except OSError:
                pass


class Zygote:
    """The serving loop's state: the steps' children, the spares per role, the control socket."""

    def __init__(self, control: socket.socket, read_paths: list[str]) -> None:
        self.control = control
        self.read_paths = read_paths
        self.children: set[int] = set()
        self.reports: dict[int, Spare] = {}  # by socket fd: handed test spares, whose parent reports the exit
        self.reported: set[int] = set()  # children whose exit the engine has been told already
        self.spares: dict[str, list[Spare]] = {role: [] for role in ROLES}
        self.refill_paused = False  # a spare died unused, or could not be forked: wait for the next request

    def spare_pids(self) -> set[int]:
        return {spare.pid for pool in self.spares.values() for spare in pool}

    def role_to_refill(self) -> str | None:
        if self.refill_paused:
            return None
        return next((role for role in ROLES if len(self.spares[role]) < SPARES_PER_ROLE), None)

    def refill(self, role: str) -> None:
        try:
            self.spares[role].append(self._fork(role))
        except OSError:
            self.refill_paused = True

    def _fork(self, role: str) -> Spare:
        spares = [spare for pool in self.spares.values() for spare in pool]
        inherited = [self.control, *(spare.sock for spare in [*spares, *self.reports.values()])]
        spare = _fork_spare(role, self.read_paths, inherited)
        _send(self.control, {"op": "spare", "pid": spare.pid})  # the engine stops it with the run
        return spare

    def hand_over(self, role: str, message: bytes, fds: list[int]) -> int:
        """Give a step to a spare of `role` (a new one when none is left or alive) and return its pid."""
        pool = self.spares[role]
        for _ in range(len(pool) + 1):
            spare = pool.pop(0) if pool else self._fork(role)
            try:
                socket.send_fds(spare.sock, [message], fds)
            except OSError:
                self._let_go(spare)
                continue
            if role == "test":
                self.reports[spare.sock.fileno()] = spare
            else:
                spare.sock.close()
            self.children.add(spare.pid)
            return spare.pid
        raise OSError(f"no {role} process could take the step")

    def _let_go(self, spare: Spare) -> None:
        """A spare that cannot take a step (its socket is gone): killed, and the engine told it is gone."""
        spare.sock.close()
        _signal_group([spare.pid])
        _send(self.control, {"op": "exited", "pid": spare.pid, "returncode": -signal.SIGKILL})

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.children:
                self.children.discard(pid)
                self._stop_report_of(pid)
                self._exited(pid, os.waitstatus_to_exitcode(status))
                self.reported.discard(pid)
            elif self._drop_spare(pid):
                _send(self.control, {"op": "exited", "pid": pid, "returncode": os.waitstatus_to_exitcode(status)})

    def _exited(self, pid: int, returncode: int) -> None:
        if pid not in self.reported:
            self.reported.add(pid)
            _send(self.control, {"op": "exited", "pid": pid, "returncode": returncode})

    def read_report(self, fd: int) -> None:
        """A supervising parent's word on how its step ended; its own exit is reaped later, silently."""
        spare = self.reports[fd]
        try:
            message = spare.sock.recv(MAX_MESSAGE)
            returncode = json.loads(message.decode("utf-8"))["returncode"] if message else None
        except (OSError, ValueError, KeyError):
            returncode = None
        self._stop_report_of(spare.pid)
        if isinstance(returncode, int):
            self._exited(spare.pid, returncode)

    def _stop_report_of(self, pid: int) -> None:
        for fd, spare in [(fd, spare) for fd, spare in self.reports.items() if spare.pid == pid]:
            del self.reports[fd]
            spare.sock.close()

    def _drop_spare(self, pid: int) -> bool:
        """Forget a spare that ended before it had a step (True when `pid` was one)."""
        for pool in self.spares.values():
            for spare in [spare for spare in pool if spare.pid == pid]:
                pool.remove(spare)
                spare.sock.close()
                self.refill_paused = True
                return True
        return False

    def kill_orphans(self) -> None:
        """Descendants of steps reparented to this subreaper (their supervising parent was killed)."""
        from child_runtime import confine_module

        known = self.children | self.spare_pids()
        _signal_group(pid for pid in confine_module()._children_of(os.getpid()) if pid not in known)

    def kill_all(self) -> None:
        _signal_group(self.children | self.spare_pids())

    def serve_request(self) -> bool:
        """One control message; False when the engine has gone."""
        try:
            message, fds, _, _ = socket.recv_fds(self.control, MAX_MESSAGE, 8)
        except OSError:
            message, fds = b"", []
        if not message:
            return False
        request = json.loads(message.decode("utf-8"))
        role = request.get("role")
        if request.get("op") != "spawn" or len(fds) != 3 or role not in ROLES:
            for fd in fds:
                os.close(fd)
            _send(self.control, {"op": "spawn_failed", "id": request.get("id"), "error": "malformed request"})
            return True
        self.refill_paused = False
        try:
            pid = self.hand_over(role, message, fds)
        except OSError as error:
            _send(self.control, {"op": "spawn_failed", "id": request.get("id"), "error": str(error)})
        else:
            _send(self.control, {"op": "spawned", "id": request["id"], "pid": pid})
        finally:
            for fd in fds:
                os.close(fd)
        return True


def serve(control_fd: int, seccomp_binding: str | None = None) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    import child_runtime

    child_runtime.preload()  # puts the test process's and the checker's folders on sys.path too
    import checker  # noqa: F401 - imported once here, not in every child
    import runner  # noqa: F401

    confine = child_runtime.confine_module()
    confine.prepare_seccomp(seccomp_binding)
    read_paths = child_runtime.sandbox_read_paths()
    confine.kernel.load_libc().prctl(confine.kernel.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    zygote = Zygote(socket.socket(fileno=control_fd), read_paths)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    try:
        _serve_requests(zygote, wake_read)
    finally:
        zygote.kill_all()  # the engine went away, or this loop failed: no step, no spare outlives the zygote


def _serve_requests(zygote: Zygote, wake_read: int) -> None:
    """Requests first; spares are forked only while no request waits."""
    import child_runtime

    _send(zygote.control, {"op": "ready", "versions": child_runtime.running_interpreter_versions(), "pid": os.getpid()})
    control_fd = zygote.control.fileno()
    while True:
        refill = zygote.role_to_refill()
        watched = [control_fd, wake_read, *zygote.reports]
        readable, _, _ = select.select(watched, [], [], REFILL_QUIET_SECONDS if refill else 1.0)
        for fd in readable:
            if fd in zygote.reports:
                zygote.read_report(fd)
        if wake_read in readable:
            try:
                while os.read(wake_read, 512):
                    pass
            except BlockingIOError:
                pass
        zygote.reap()
        zygote.kill_orphans()
        if control_fd in readable:
            if not zygote.serve_request():
                return
        elif refill is not None:
            zygote.refill(refill)


if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
