"""One run at a time per run folder: `<run>/.lock`, held with an exclusive `flock` for the life of the process.

The kernel drops the lock when its process dies (even by SIGKILL), so a lock file left by a dead process is
simply taken over; the file's content (pid, host, command, start time) only names the holder for the one-line
refusal a second `doit run` / `generate` / `score` on the same run folder prints.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

from stages.config.command_line import invoked


class RunLocked(RuntimeError):
    """Another live process holds the run folder's lock (one line naming it)."""


@dataclass(frozen=True)
class LockHolder:
    pid: int
    host: str
    command: str
    started: str

    @classmethod
    def this_process(cls) -> LockHolder:
        command = invoked().shown()
        return cls(os.getpid(), socket.gethostname(), command[:300], time.strftime("%Y-%m-%dT%H:%M:%S%z"))

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}, started {self.started}: {self.command}"


def read_holder(handle: IO[str]) -> LockHolder | None:
    handle.seek(0)
    try:
        record = json.loads(handle.read() or "null")
        return LockHolder(int(record["pid"]), str(record["host"]), str(record["command"]), str(record["started"]))
    except (ValueError, TypeError, KeyError):
        return None


class RunLock:
    """The lock of one run folder; `acquire()` raises RunLocked when another process holds it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle: IO[str] | None = None

    def acquire(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            handle = open(self.path, "a+", encoding="utf-8")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = read_holder(handle)
                handle.close()
                who = holder.describe() if holder else "a process that has not written its name yet"
                raise RunLocked(
                    f"{self.path.parent} is in use by another run ({who}); wait for it to finish or stop it, then rerun"
                ) from None
            if self._same_file(handle):  # not a file another holder removed meanwhile
                break
            handle.close()
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(asdict(LockHolder.this_process())))
        handle.flush()
        self.handle = handle
        return self

    def _same_file(self, handle: IO[str]) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        if self.handle is None:
            return
        try:
            self.path.unlink()
        except OSError:
            pass
        self.handle.close()  # closing drops the flock
        self.handle = None
