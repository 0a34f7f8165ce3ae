"""A memory cgroup per confined process tree (`confine.py`'s step 2): what a step's processes hold together, kernel
objects included (anonymous files, tmpfs pages, pipe and socket buffers), is bounded by one limit, where the
address-space limit bounds each process alone and counts no page that is not mapped.

Where the machine allows it: a cgroup of the memory controller (v1, or v2 with the controller enabled for the
children of the cgroup this process is in) that this process can create a child of, as root wherever the hierarchy
is mounted writable, as a normal user where it is delegated to them. The supervising process (A) names the child
(`step_folder`: after its own pid, so that a leftover is known for one once A is gone) before it forks the
confined process (B); B creates and joins it (`enter`, a spare B before its step) and sets the limit (`limit`) before
it drops its privileges, and A removes it
once B has ended (`remove`; a child left by an A that was killed is removed by the next A's `sweep`). Every
process B starts is in it. At the limit the kernel's OOM killer ends a process of that step only.

Standalone like `kernel.py` (standard library only), loaded by path by `confine.py`.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass

STEP_PREFIX = "scicode-step-"
CONTROLLER = "memory"
LIMIT_FILES = {1: "memory.limit_in_bytes", 2: "memory.max"}
SWAP_LIMIT_FILES = {1: "memory.memsw.limit_in_bytes", 2: "memory.swap.max"}
REMOVE_WAIT_SECONDS = 2.0


@dataclass(frozen=True)
class Hierarchy:
    """The memory cgroup this process is in: its version and its folder."""

    version: int
    folder: str

    @property
    def limit_file(self) -> str:
        return LIMIT_FILES[self.version]

    @property
    def name(self) -> str:
        return f"cgroup v{self.version}"


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(value)


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(root, mount point, filesystem type, super options) of every mount this process sees."""
    mounts = []
    for line in _read("/proc/self/mountinfo").splitlines():
        fields, _, tail = line.partition(" - ")
        parts, rest = fields.split(), tail.split()
        if len(parts) >= 5 and len(rest) >= 3:
            mounts.append((parts[3], parts[4], rest[0], set(rest[2].split(","))))
    return mounts


def _under(mount_root: str, mount_point: str, path: str) -> str | None:
    """Where the cgroup `path` (as /proc/self/cgroup names it) lies under a mount of `mount_root`."""
    if mount_root == "/":
        return mount_point + (path if path != "/" else "")
    if path == mount_root or path.startswith(mount_root + "/"):
        return mount_point + path[len(mount_root) :]
    return None


def own_memory_cgroup() -> tuple[Hierarchy | None, str]:
    """The memory cgroup of this process where children of it can have a memory limit, else None and why not."""
    try:
        memberships = [line.split(":", 2) for line in _read("/proc/self/cgroup").splitlines() if line.count(":") >= 2]
        mounts = _mounts()
    except OSError as error:
        return None, f"cannot read this process's cgroups: {error.strerror}"
    for _, controllers, path in memberships:
        if CONTROLLER in controllers.split(","):
            for root, point, kind, options in mounts:
                if kind == "cgroup" and CONTROLLER in options and (folder := _under(root, point, path)):
                    return Hierarchy(1, folder), ""
    for hierarchy_id, controllers, path in memberships:
        if hierarchy_id == "0" and controllers == "":
            for root, point, kind, _ in mounts:
                if kind == "cgroup2" and (folder := _under(root, point, path)):
                    return _v2(folder)
    return None, "no memory cgroup hierarchy is mounted"


def _v2(folder: str) -> tuple[Hierarchy | None, str]:
    try:
        enabled = _read(os.path.join(folder, "cgroup.subtree_control")).split()
    except OSError as error:
        return None, f"cgroup v2: cannot read {folder}/cgroup.subtree_control: {error.strerror}"
    if CONTROLLER not in enabled:
        return None, f"cgroup v2: the memory controller is not enabled for the children of {folder}"
    return Hierarchy(2, folder), ""


def step_folder(hierarchy: Hierarchy, owner: int) -> str:
    """The cgroup of the process tree supervised by `owner` (A's pid)."""
    return os.path.join(hierarchy.folder, f"{STEP_PREFIX}{owner}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep(hierarchy: Hierarchy) -> None:
    """Remove the step cgroups beside `hierarchy`'s children whose supervising process is gone (a cgroup that still
    holds a process is not removed: the kernel refuses)."""
    try:
        names = os.listdir(hierarchy.folder)
    except OSError:
        return
    for name in names:
        owner = name[len(STEP_PREFIX) :]
        if name.startswith(STEP_PREFIX) and owner.isdigit() and not _alive(int(owner)):
            try:
                os.rmdir(os.path.join(hierarchy.folder, name))
            except OSError:
                pass


def enter(hierarchy: Hierarchy, folder: str) -> None:
    """Create the cgroup `folder` and move this process into it (without a limit yet: `limit` sets it); OSError when
    either fails (this process then stays where it was). Moving a process between cgroups waits for the kernel's
    RCU grace period (about 10 ms): a spare does it before its step."""
    try:
        os.mkdir(folder, 0o755)
    except FileExistsError:
        pass
    if not os.path.exists(os.path.join(folder, hierarchy.limit_file)):
        raise OSError(errno.ENOTSUP, f"no memory controller in {folder}")
    _write(os.path.join(folder, "cgroup.procs"), "0")


def limit(hierarchy: Hierarchy, folder: str, limit_bytes: int) -> None:
    """Limit the cgroup `folder` to `limit_bytes` of memory (swap included where the kernel counts it)."""
    _write(os.path.join(folder, hierarchy.limit_file), str(limit_bytes))
    swap_file = os.path.join(folder, SWAP_LIMIT_FILES[hierarchy.version])
    if os.path.exists(swap_file):
        _write(swap_file, str(limit_bytes) if hierarchy.version == 1 else "0")


def remove(folder: str, wait_seconds: float = REMOVE_WAIT_SECONDS) -> None:
    """Remove the cgroup `folder` once its last process has gone (waiting up to `wait_seconds` for that)."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            os.rmdir(folder)
            return
        except FileNotFoundError:
            return
        except OSError as error:
            if error.errno != errno.EBUSY or time.monotonic() >= deadline:
                return
        time.sleep(0.01)
