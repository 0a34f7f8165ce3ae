"""Ctrl-C and SIGTERM: stop every child at once, let doit save the records of finished tasks, end with one line."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from stages.execution import live_processes


class _Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM, raised in the main thread so doit saves the records of finished tasks."""


STOP_GRACE_SECONDS = 1.5  # after the first signal the process is gone within this, whatever still runs
_EXIT_CALLBACKS: list[Callable[[], None]] = []
_stop_signal: list[int] = []


def on_exit_now(callback: Callable[[], None]) -> None:
    """Run `callback` (e.g. release the run lock) when an interrupted run ends with `exit_now`."""
    _EXIT_CALLBACKS.append(callback)


def exit_now(code: int) -> None:
    """End the process at once: threads still running (cut short by the stop) are not waited for."""
    for callback in (*_EXIT_CALLBACKS, live_processes.remove_tracked_folders):
        try:
            callback()
        except Exception:  # noqa: BLE001 - nothing may delay the exit
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def interrupted_line(signum: int) -> str:
    what = "keyboard" if signum == signal.SIGINT else f"terminated by signal {signum}"
    return (
        f"scicode: interrupted ({what}); running tests and tool snippets were stopped, finished work is saved: "
        "rerun the same command to resume"
    )


def stop_on_signal(signum: int, frame: Any) -> None:
    """First Ctrl-C / SIGTERM: kill every child of ours, stop saving, and leave doit's loop so it saves its records;
    a watchdog ends the process within STOP_GRACE_SECONDS in any case. Later signals change nothing."""
    if _stop_signal:
        return
    _stop_signal.append(signum)
    live_processes.abort_all()
    watchdog = threading.Timer(STOP_GRACE_SECONDS, _exit_after_stop)
    watchdog.daemon = True
    watchdog.start()
    raise _Interrupted(f"signal {signum}")


_exit_once = threading.Lock()


def _exit_after_stop() -> None:
    if not _exit_once.acquire(blocking=False):
        return  # the other path (watchdog or excepthook) is already ending the process
    print(interrupted_line(_stop_signal[0]), file=sys.stderr)
    exit_now(128 + _stop_signal[0])


def install_interrupt_handling() -> None:
    """Ctrl-C and SIGTERM stop the run at once (`stop_on_signal`) and end it with one line, no traceback."""
    signal.signal(signal.SIGTERM, stop_on_signal)
    signal.signal(signal.SIGINT, stop_on_signal)
    previous_hook = sys.excepthook

    def hook(kind: type[BaseException], error: BaseException, traceback: Any) -> None:
        if issubclass(kind, KeyboardInterrupt):
            if not _stop_signal:
                _stop_signal.append(signal.SIGINT)
            live_processes.abort_all()
            _exit_after_stop()
            return
        previous_hook(kind, error, traceback)

    sys.excepthook = hook
