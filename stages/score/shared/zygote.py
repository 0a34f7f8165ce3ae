"""The warm interpreter (zygote): imports numpy/scipy/sympy once and forks one child per step.

Run by the engine as `python_binary zygote.py <control_fd> [<seccomp binding path>]` with a scrubbed
environment; it never sees targets or secrets. It loads the seccomp binding and builds the filter once, so every
child inherits them ready. Control messages are JSON over an AF_UNIX SOCK_SEQPACKET socket:

* engine -> zygote `{"op": "spawn", "id", "role", "cwd", "env", "memory_mb", "scratch_limit_mb"}` carrying three descriptors
  (stdout, stderr, channel) as SCM_RIGHTS; `role` is "test" (the untrusted test process,
  `test_process/runner.py`) or "checker" (`checker/checker.py`);
* zygote -> engine `{"op": "ready", "versions"}`, `{"op": "spawned", "id", "pid"}`,
  `{"op": "exited", "pid", "returncode"}`, `{"op": "spawn_failed", "id", "error"}`.

A child starts a new session (its own process group, which the engine kills as a whole), moves to its
scratch folder, takes its stdout/stderr/channel as fds 1/2/3, closes every other descriptor (including
the control socket) and replaces its environment. A test child then becomes the supervising parent of
the confined test process (`confine.supervise`: PID 1 of new namespaces, its scratch a size-limited tmpfs,
Landlock, no capabilities, seccomp, memory limit); a checker child confines itself and runs the checker. Children always leave with
`os._exit`. The zygote is a child subreaper: an orphan of a step reparented to it is killed. When the
engine goes away the zygote kills its children's groups and exits. It never runs model code.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import traceback
from typing import Any

CHANNEL_FD = 3
MAX_MESSAGE = 1 << 20


def _send(control: socket.socket, record: dict[str, Any]) -> None:
    control.send(json.dumps(record).encode("utf-8"))


def _child(request: dict[str, Any], fds: list[int], read_paths: list[str]) -> None:
    code = 70
    try:
        os.setsid()
        _die_with_parent()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        stdout_fd, stderr_fd, channel_fd = fds
        os.chdir(request["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(stdout_fd, 1)
        os.dup2(stderr_fd, 2)
        os.dup2(channel_fd, CHANNEL_FD)
        os.closerange(CHANNEL_FD + 1, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 4096)
        os.environ.clear()
        os.environ.update(request["env"])
        code = _run_role(request, read_paths)
    except BaseException:  # noqa: BLE001 - the child must never return into the zygote loop
        try:
            os.write(2, traceback.format_exc().encode("utf-8", "replace"))
        except OSError:
            pass
    finally:
        os._exit(code)


def _die_with_parent() -> None:
    """SIGKILL this child when the zygote ends, however it ends (its test process's namespace goes too)."""
    from child_runtime import confine_module

    confine = confine_module()
    confine.kernel.load_libc().prctl(confine.kernel.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _run_role(request: dict[str, Any], read_paths: list[str]) -> int:
    import checker
    import runner
    from child_runtime import confine_module

    memory_mb = request.get("memory_mb")
    if request.get("role") == "checker":
        return int(checker.serve_confined(CHANNEL_FD, memory_mb, read_paths))
    confine = confine_module()
    scratch = request["cwd"]
    scratch_limit_mb = request.get("scratch_limit_mb")
    code = int(
        confine.supervise(lambda: runner.serve_confined(CHANNEL_FD, memory_mb, read_paths, scratch, scratch_limit_mb))
    )
    confine.exit_like(code)
    return code


def _kill_orphans(children: set[int]) -> None:
    """Descendants of steps reparented to this subreaper (their supervising parent was killed)."""
    from child_runtime import confine_module

    for pid in confine_module()._children_of(os.getpid()):
        if pid not in children:
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except OSError:
                    pass


def _reap(control: socket.socket, children: set[int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid not in children:
            continue
        children.discard(pid)
        _send(control, {"op": "exited", "pid": pid, "returncode": os.waitstatus_to_exitcode(status)})


def _kill_children(children: set[int]) -> None:
    for pid in children:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except OSError:
                pass


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
    control = socket.socket(fileno=control_fd)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: set[int] = set()
    try:
        _serve_requests(control, wake_read, children, read_paths)
    finally:
        _kill_children(children)  # the engine went away, or this loop failed: no step outlives the zygote


def _serve_requests(control: socket.socket, wake_read: int, children: set[int], read_paths: list[str]) -> None:
    import child_runtime

    _send(control, {"op": "ready", "versions": child_runtime.running_interpreter_versions(), "pid": os.getpid()})
    while True:
        readable, _, _ = select.select([control.fileno(), wake_read], [], [], 1.0)
        if wake_read in readable:
            try:
                while os.read(wake_read, 512):
                    pass
            except BlockingIOError:
                pass
        _reap(control, children)
        _kill_orphans(children)
        if control.fileno() not in readable:
            continue
        try:
            message, fds, _, _ = socket.recv_fds(control, MAX_MESSAGE, 8)
        except OSError:
            message, fds = b"", []
        if not message:
            return
        request = json.loads(message.decode("utf-8"))
        if request.get("op") != "spawn" or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            _send(control, {"op": "spawn_failed", "id": request.get("id"), "error": "malformed request"})
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as error:
            for fd in fds:
                os.close(fd)
            _send(control, {"op": "spawn_failed", "id": request.get("id"), "error": str(error)})
            continue
        if pid == 0:
            control.detach()
            _child(request, fds, read_paths)
        children.add(pid)
        for fd in fds:
            os.close(fd)
        _send(control, {"op": "spawned", "id": request["id"], "pid": pid})


if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
