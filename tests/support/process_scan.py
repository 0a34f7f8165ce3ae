"""Finding processes by command line: proof that nothing started by model code survives its step."""

from __future__ import annotations

import os
import secrets
import time


def unique_sleep_seconds() -> str:
    """A `sleep` argument no other process on the machine has (to find survivors by command line)."""
    return f"{300 + secrets.randbelow(10**6) / 10**7:.7f}"


def processes_with(marker: str) -> list[int]:
    """Live processes (not zombies) whose command line contains `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                command = handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
            with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                state = handle.read().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if marker in command and state != "Z" and int(entry) != os.getpid():
            found.append(int(entry))
    return found


def assert_no_process_with(marker: str, wait_seconds: float = 5.0) -> None:
    deadline = time.monotonic() + wait_seconds
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not processes_with(marker), f"a process started by model code survived: {processes_with(marker)}"


def working_directory(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def runs_a_step(pid: int) -> bool:
    """A confined process whose working directory is a step's scratch: the zygote's spares, forked before their
    step, still sit where the zygote started."""
    from stages.score.parent.engine import SCRATCH_PREFIX

    return os.path.basename(working_directory(pid)).startswith(SCRATCH_PREFIX)
