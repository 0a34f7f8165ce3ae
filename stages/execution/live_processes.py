"""Every child process (or process group) of ours that runs model code, tests or tool snippets, so that a
Ctrl-C or SIGTERM can stop them all at once.

Launchers call `register(pid)` right after starting a child in its own process group and `unregister(pid)`
once it is reaped. `abort_all()` (called by the interrupt handler) marks the process as stopping, SIGKILLs
every registered group, and from then on kills any child registered late at once. `raise_if_stopping()` is
how work that is still running in other threads learns that its result must not be used nor saved:
`RunInterrupted` is raised before any artifact is written and before any further model or tool call.
"""

from __future__ import annotations

import os
import signal
import threading

_lock = threading.Lock()
_live: set[int] = set()
_folders: set[str] = set()
_stopping = threading.Event()


class RunInterrupted(RuntimeError):
    """The run is being stopped (Ctrl-C or SIGTERM): nothing more is started or saved."""


def _kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def register(pid: int) -> None:
    """Track `pid` (the leader of its own process group); killed at once when the run is already stopping."""
    with _lock:
        _live.add(pid)
    if _stopping.is_set():
        _kill_group(pid)


def unregister(pid: int) -> None:
    with _lock:
        _live.discard(pid)


def track_folder(path: object) -> None:
    """A scratch folder of a running child: removed by `remove_tracked_folders` when the run is stopped."""
    with _lock:
        _folders.add(str(path))


def untrack_folder(path: object) -> None:
    with _lock:
        _folders.discard(str(path))


def remove_tracked_folders() -> None:
    """Remove the scratch folders of children killed by the stop (their normal cleanup never runs)."""
    from stages.execution.tree_removal import remove_tree

    with _lock:
        folders = set(_folders)
        _folders.clear()
    for folder in folders:
        remove_tree(folder)


def live() -> set[int]:
    with _lock:
        return set(_live)


def abort_all() -> int:
    """Stop everything: from now on nothing starts nor is saved, and every registered group is SIGKILLed.
    Returns how many groups were killed."""
    _stopping.set()
    pids = live()
    for pid in pids:
        _kill_group(pid)
    return len(pids)


def stopping() -> bool:
    return _stopping.is_set()


def raise_if_stopping() -> None:
    if _stopping.is_set():
        raise RunInterrupted("the run is being stopped")


def reset() -> None:
    """For tests that abort in-process: forget the stop and every registration."""
    with _lock:
        _live.clear()
        _folders.clear()
    _stopping.clear()
