"""Child processes: scrubbed environment, limits, bounded output, scratch folders.

`run_isolated` runs local code-interpreter snippets (generation), whose program is the confinement
launcher (`stages/execution/confinement/confine.py`): a new session killed as a whole at the timeout and after
exit, and, inside it, a PID namespace that takes every descendant with it. The scoring engine uses the
environment, the bounded readers and the scratch folders for its test processes.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from stages.execution import live_processes
from stages.execution.redaction import SECRET_MARKERS, is_secret_name  # noqa: F401  (one list for files and environments)
from stages.execution.spawning import popen_dying_with_this_process
from stages.execution.tree_removal import remove_tree

KEPT_VARIABLES: tuple[str, ...] = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TERM",
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "PYENV_VERSION",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "LD_LIBRARY_PATH",
)
DEFAULT_OUTPUT_LIMIT = 64 * 1024
TRUNCATION_MARKER = "\n[... output truncated: {dropped} more bytes not shown ...]\n"
KILL_GRACE_SECONDS = 0.5


def scrubbed_environment(extra: Mapping[str, str] | None = None, *, home: Path | None = None) -> dict[str, str]:
    """A minimal environment: a short allow-list of the parent's variables, never a secret, plus `extra`."""
    env = {name: os.environ[name] for name in KEPT_VARIABLES if name in os.environ and not is_secret_name(name)}
    env.setdefault("PATH", os.defpath)
    env.setdefault("LANG", "C.UTF-8")
    env["PYTHONIOENCODING"] = "utf-8"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["MPLBACKEND"] = "Agg"
    if home is not None:
        env["HOME"] = str(home)
        env["TMPDIR"] = str(home)
    for name, value in (extra or {}).items():
        if is_secret_name(name):
            raise ValueError(f"refusing to pass secret-looking variable {name} to an isolated process")
        env[name] = value
    return env


@dataclass(frozen=True)
class Limits:
    timeout_seconds: float
    memory_mb: int | None = None
    output_limit_bytes: int = DEFAULT_OUTPUT_LIMIT


@dataclass(frozen=True)
class ProcessResult:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float
    stdout_bytes: int
    stderr_bytes: int

    @property
    def killed_by_signal(self) -> int | None:
        return -self.returncode if self.returncode is not None and self.returncode < 0 else None


class BoundedReader(threading.Thread):
    """Drains a pipe, keeping the first `limit` bytes; counts the rest."""

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.limit = limit
        self.kept = bytearray()
        self.total = 0

    def run(self) -> None:
        try:
            for chunk in iter(lambda: self.stream.read(65536), b""):
                room = self.limit - len(self.kept)
                if room > 0:
                    self.kept.extend(chunk[:room])
                self.total += len(chunk)
        except (OSError, ValueError):
            pass

    def text(self) -> str:
        text = bytes(self.kept).decode("utf-8", errors="replace")
        dropped = self.total - len(self.kept)
        return text + TRUNCATION_MARKER.format(dropped=dropped) if dropped > 0 else text


def _limit_resources(memory_mb: int | None) -> None:
    """Runs in the child before exec: a memory ceiling and no core files."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_mb:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def kill_process_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_isolated(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    limits: Limits,
    stdin_data: bytes | None = None,
) -> ProcessResult:
    """Run `argv` in its own session in `cwd`; kill the whole group at the timeout and after exit. The child dies
    with this process however it ends (stages/execution/spawning.py)."""
    started = time.monotonic()
    process = popen_dying_with_this_process(
        argv,
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=lambda: _limit_resources(limits.memory_mb),
        close_fds=True,
    )
    live_processes.register(process.pid)  # stopped at once by a Ctrl-C / SIGTERM
    assert process.stdout is not None and process.stderr is not None  # both are pipes
    readers = [
        BoundedReader(process.stdout, limits.output_limit_bytes),
        BoundedReader(process.stderr, limits.output_limit_bytes),
    ]
    for reader in readers:
        reader.start()
    if stdin_data is not None:
        threading.Thread(target=_feed_stdin, args=(process.stdin, stdin_data), daemon=True).start()
    timed_out = False
    try:
        process.wait(timeout=limits.timeout_seconds)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        kill_process_group(process.pid)
        process.wait()
        live_processes.unregister(process.pid)
    live_processes.raise_if_stopping()  # killed by the stop: not a result
    duration = time.monotonic() - started
    for reader in readers:
        reader.join(timeout=KILL_GRACE_SECONDS)
    stdout_reader, stderr_reader = readers
    return ProcessResult(
        returncode=process.returncode,
        stdout=stdout_reader.text(),
        stderr=stderr_reader.text(),
        timed_out=timed_out,
        duration_s=duration,
        stdout_bytes=stdout_reader.total,
        stderr_bytes=stderr_reader.total,
    )


def _feed_stdin(stream: IO[bytes], data: bytes) -> None:
    try:
        stream.write(data)
        stream.close()
    except (BrokenPipeError, OSError):
        pass


class ScratchDir:
    """A temp folder under `base` removed on exit, whatever the code inside left there."""

    def __init__(self, base: Path | None, prefix: str) -> None:
        self.base = base
        self.prefix = prefix
        self.path: Path | None = None

    def __enter__(self) -> Path:
        if self.base is not None:
            Path(self.base).mkdir(parents=True, exist_ok=True)
        self.path = Path(tempfile.mkdtemp(prefix=self.prefix, dir=self.base))
        live_processes.track_folder(self.path)  # removed by a Ctrl-C / SIGTERM stop
        return self.path

    def __exit__(self, *exc_info: object) -> None:
        if self.path is not None:
            remove_tree(self.path)  # through descriptors: a link planted inside is removed, never followed
            live_processes.untrack_folder(self.path)
