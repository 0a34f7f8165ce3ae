"""Starting a child process that dies with this process, however this process dies (`kill -9`, the OOM killer).

Linux's parent-death signal (`PR_SET_PDEATHSIG`) is sent when the *thread* that forked the child ends, not the
process. So every such child is forked by one long-lived thread of this process (the spawner below), which ends
only with the process: a child forked by a worker thread that returns early would otherwise be killed with that
thread. Between fork and exec the child sets SIGKILL as its parent-death signal, and ends at once when this process
already died in between (its parent is then another process). A child confined by
`stages/execution/confinement/confine.py` passes the signal on to the process that runs model code, which is PID 1
of its own namespace: the kernel then kills everything model code started.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Any

PR_SET_PDEATHSIG = 1  # prctl option: the signal this process gets when its parent thread ends
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spawner")  # never shut down before exit


@lru_cache(maxsize=1)
def _libc() -> Any:
    """The C library, loaded in the parent (the child between fork and exec only calls into it)."""
    return ctypes.CDLL(None, use_errno=True)


def _dying_with(parent: int, then: Callable[[], None] | None) -> Callable[[], None]:
    libc = _libc()

    def before_exec() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was set
            os.kill(os.getpid(), signal.SIGKILL)
        if then is not None:
            then()

    return before_exec


def popen_dying_with_this_process(
    argv: Sequence[str], *, preexec_fn: Callable[[], None] | None = None, **options: Any
) -> subprocess.Popen[bytes]:
    """`subprocess.Popen(argv, **options)`, forked by the spawner thread, the child killed when this process ends
    (`preexec_fn` runs in the child after the parent-death signal is set). OSError as Popen raises it."""

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(list(argv), preexec_fn=_dying_with(os.getpid(), preexec_fn), **options)

    return _SPAWNER.submit(start).result()
