"""Kernel confinement of every process that runs model-written code (test processes, tool snippets), and of the
checker.

Standalone on purpose (standard library only; the seccomp binding is loaded by path, see below): it runs inside the
zygote's children, inside fresh test processes and as a launcher script (`python confine.py [options] -- program
args...`) for tool snippets, all under `python_binary`, which may be another interpreter than the pipeline's.

What a confined process gets, in this order (each step is skipped, and said so, where the kernel or the privileges
do not allow it):

1. *Namespaces and mounts.* The launching process (A) calls `unshare(CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
   CLONE_NEWNS)` (with `CLONE_NEWUSER` and an identity uid/gid map when it is not root) and forks the confined
   process (B), which is PID 1 of a new PID namespace: when B ends, or when A and B are killed as a process group,
   the kernel kills every process left in the namespace, whatever session or group it moved to. The new network
   namespace has no interface but a loopback that is down. A is also a child subreaper, so without namespaces
   orphaned descendants are reparented to A, which kills every one it can find when B ends. In its private mount
   namespace B makes every mount private, limits its PID namespace to `TASK_LIMIT` tasks (the namespace's own
   `pid_max`: a fork bomb stops there) and mounts a size-limited tmpfs over its scratch folder (the files the
   parent left there are copied in): nothing written there outlives the namespace, and writing more than
   `scratch_limit_mb` fails with ENOSPC inside the step.
2. *Limits.* RLIMIT_AS (memory), RLIMIT_CORE = 0, RLIMIT_FSIZE = the scratch limit (so that without a tmpfs the
   scratch is still bounded, per file), RLIMIT_NOFILE = `DESCRIPTOR_LIMIT` (a pipe's or a socket's buffer is
   memory outside the address space). First of all, where the machine allows it, B creates and joins the memory
   cgroup A named for it (`cgroups.py`), limited to the memory and scratch limits together: every process of the
   step shares that one bound, kernel objects included.
3. *Landlock* (ABI >= 1): reads (and execution) only beneath the interpreter's prefixes (a venv's and its base's),
   its site-packages, the system library folders, the few /etc files the C library and Python read, and the extra
   folders the caller names; writes only beneath the scratch folder (and /dev/null). No /proc, no /home or /root,
   no data folder, no targets file. ABI >= 4: no TCP bind or connect. ABI >= 6: no signal to a process outside
   the domain and no abstract unix socket outside it.
4. *Capabilities.* Whenever any are held (root, or a user namespace): securebits locked so that exec never regains
   them, the bounding set emptied, effective/permitted/inheritable sets cleared. `no_new_privs` is set in any case.
5. *Seccomp* (a filter built by the system's libseccomp through the `pyseccomp` binding, never hand-written BPF):
   the system calls of `kernel.DENIED_SYSCALLS` fail with EPERM; `socket` only for AF_INET and AF_INET6 (seccomp cannot
   see a unix socket's path, so every other family goes, unix and netlink first; `socketpair` stays); `clone` and
   `unshare` with any CLONE_NEW* flag fail with EPERM; `clone3` fails with ENOSYS (its flags are in memory seccomp
   cannot read; the C library then falls back to `clone`, so threads keep working); the terminal ioctls TIOCSTI
   and TIOCLINUX fail with EPERM; a system call of another ABI (i386 `int 0x80`, x32) kills the process.

The binding: `pyseccomp` is one pure-Python file over ctypes, so the pipeline's own copy works in any CPython 3
interpreter. The pipeline passes its path (`--seccomp-binding PATH`, the zygote's second argument); it is loaded
by path before Landlock is applied (so the pipeline's site-packages need not be readable by model code), or
imported from `python_binary`'s own environment when no path is given. Without it (or without libseccomp) the
process runs without a filter and the probe says so.

The kernel interfaces of steps 3 to 5 (libc, Landlock, capabilities, seccomp) are `kernel.py`, which this file
loads by path (it is itself loaded by path, or run as a script under `python -I`).

As a launcher (`--timeout-seconds S`), A kills B when it still runs S seconds after A started: the bound holds even
when the process that started A is gone. The pipeline starts A with SIGKILL as its parent-death signal
(stages/execution/spawning.py); A keeps it across entering a user namespace (which clears it) and B gets the
same signal from A, so a `kill -9` of the pipeline takes A, B and B's namespace with it.

`probe()` (or `python confine.py --probe [--seccomp-binding PATH]`) reports what this kernel and these privileges
allow, as the one-line `Confinement.description` that config.json and the summary carry; it goes through the
same functions as a confined process.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import resource
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, TypedDict


def _load_sibling(name: str) -> ModuleType:
    """A module of this folder, loaded by path once per process: this file is loaded by path too (by the test
    process, the checker and the zygote) or run as a script under `python -I`, so its folder is not on sys.path."""
    unique = f"_scicode_confinement_{name}"
    loaded = sys.modules.get(unique)
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location(
        unique, os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {name}.py beside {__file__}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[unique] = module
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:
    import argparse

    from stages.execution.confinement import cgroups, kernel
else:
    kernel = _load_sibling("kernel")
    cgroups = _load_sibling("cgroups")

# What the callers of this file use of the kernel interfaces: they prepare the filter before anything else.
ConfinementError = kernel.ConfinementError
prepare_seccomp = kernel.prepare_seccomp
interpreter_read_paths = kernel.interpreter_read_paths

TASK_LIMIT = 1024  # processes and threads at once in a step's PID namespace (its pid_max)
DESCRIPTOR_LIMIT = 256  # open descriptors per confined process (RLIMIT_NOFILE): each may hold a kernel buffer
SCRATCH_INODES_PER_MB = 128


@dataclass(frozen=True)
class Confinement:
    """What this kernel and these privileges give a confined process."""

    landlock_abi: int = 0
    landlock_reason: str = ""
    namespaces: str = ""  # e.g. "pid+net+ipc+mount", "" when unavailable
    namespace_reason: str = ""
    capabilities_dropped: bool = False
    identity: str = ""  # whose ids model code runs under, e.g. "ids 65534:65534 owning nothing on the host"
    seccomp: bool = False
    seccomp_reason: str = ""
    scratch_tmpfs: bool = False
    scratch_reason: str = ""
    task_limit: int = 0
    memory_cgroup: str = ""  # e.g. "cgroup v1": the step's processes share one memory limit; "" when unavailable
    memory_cgroup_reason: str = ""
    problems: tuple[str, ...] = field(default_factory=tuple)

    @property
    def full(self) -> bool:
        """Filesystem, network and scope rules, every descendant killed with its step, the system-call filter and
        a size-limited scratch, under ids that own no host file (or the user's own, when not root)."""
        return (
            self.landlock_abi >= 6
            and "pid" in self.namespaces
            and "mount" in self.namespaces
            and self.seccomp
            and self.scratch_tmpfs
            and bool(self.identity)
        )

    @property
    def description(self) -> str:
        if self.landlock_abi <= 0 and not self.namespaces and not self.seccomp:
            reasons = "; ".join(
                reason for reason in (self.landlock_reason, self.namespace_reason, self.seccomp_reason) if reason
            )
            return f"none ({reasons or 'unavailable'})"
        parts = []
        if self.landlock_abi > 0:
            rules = ["fs"] + (["net"] if self.landlock_abi >= 4 else []) + (["scope"] if self.landlock_abi >= 6 else [])
            parts.append(f"landlock ABI {self.landlock_abi}, {'+'.join(rules)}")
        else:
            parts.append(f"no landlock ({self.landlock_reason})")
        if self.namespaces:
            tasks = f" (at most {self.task_limit} tasks)" if self.task_limit else ""
            parts.append(f"{self.namespaces} namespaces{tasks}")
        else:
            parts.append(f"no namespaces ({self.namespace_reason}); descendants killed by a subreaper")
        if self.capabilities_dropped:
            parts.append("capabilities dropped")
        if self.identity:
            parts.append(f"runs as {self.identity}")
        parts.append("seccomp filter" if self.seccomp else f"no seccomp filter ({self.seccomp_reason})")
        parts.append(
            "scratch on a size-limited tmpfs"
            if self.scratch_tmpfs
            else f"scratch bounded per file only ({self.scratch_reason})"
        )
        parts.append(
            f"memory bounded per step ({self.memory_cgroup})"
            if self.memory_cgroup
            else f"memory bounded per process only (no memory cgroup: {self.memory_cgroup_reason})"
        )
        return ", ".join(parts)

    def as_record(self) -> dict[str, object]:
        """What the probe prints (JSON): every field, the description and whether the confinement is full."""
        return dict(asdict(self), description=self.description, full=self.full)


# ---------------------------------------------------------------------------
# 1. Namespaces (in A) and mounts (in B)
# ---------------------------------------------------------------------------

# The namespaces the supervising process (A) created for its child (B), and why not more: set in A before the
# fork, read in B.
_SUPERVISED_NAMESPACES = ""
_SUPERVISED_NAMESPACES_REASON = ""
# The memory cgroup A named for B's process tree (B creates and joins it), and why there is none.
_STEP_CGROUP: tuple[cgroups.Hierarchy, str] | None = None
_STEP_CGROUP_REASON = ""


def _unshare_flags(with_mount: bool) -> int:
    flags = kernel.CLONE_NEWPID | kernel.CLONE_NEWNET | kernel.CLONE_NEWIPC | (kernel.CLONE_NEWNS if with_mount else 0)
    return flags if os.geteuid() == 0 else flags | kernel.CLONE_NEWUSER


def _map_identity(uid: int, gid: int) -> None:
    """In a new user namespace: keep the uid and gid this process had before `unshare` (read there: inside, before
    the map is written, they read as the overflow id, which the kernel refuses to map)."""
    for name, content in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w", encoding="ascii") as handle:
            handle.write(content)


def unshare_namespaces() -> tuple[str, str]:
    """New PID/network/IPC (and mount) namespaces for the children of this process (the mount namespace for this
    process too): ("pid+net+ipc+mount", "") or ("pid+net+ipc", why no mount namespace) or ("", why not)."""
    try:
        libc = kernel.load_libc()
    except OSError as error:
        return "", str(error)
    uid, gid = os.geteuid(), os.getegid()
    for with_mount in (True, False):
        if libc.unshare(_unshare_flags(with_mount)) == 0:
            break
        reason = f"unshare: {kernel.errno_text()}"
    else:
        return "", reason
    if uid != 0:
        try:
            _map_identity(uid, gid)
        except OSError as error:
            return "", f"user namespace id map: {error}"
    names = ("user+" if uid != 0 else "") + ("pid+net+ipc+mount" if with_mount else "pid+net+ipc")
    return names, "" if with_mount else f"no mount namespace ({reason})"


def _mount(source: str | None, target: str, kind: str | None, flags: int, data: str | None = None) -> None:
    encoded = [None if value is None else value.encode() for value in (source, target, kind, data)]
    if kernel.load_libc().mount(encoded[0], encoded[1], encoded[2], flags, encoded[3]) != 0:
        raise OSError(ctypes.get_errno(), f"mount {kind or 'propagation'} on {target}: {kernel.errno_text()}")


def _umount(target: str) -> None:
    if kernel.load_libc().umount2(target.encode(), kernel.MNT_DETACH) != 0:
        raise OSError(ctypes.get_errno(), f"umount {target}: {kernel.errno_text()}")


def limit_tasks(limit: int = TASK_LIMIT) -> None:
    """In B, PID 1 of its namespace: set the namespace's own pid_max through a procfs of that namespace, mounted
    over /proc for a moment in B's private mount namespace (the kernel gives each PID namespace its own pid_max since
    Linux 6.14)."""
    _mount("proc", "/proc", "proc", kernel.MS_NOSUID | kernel.MS_NODEV | kernel.MS_NOEXEC)
    try:
        with open("/proc/sys/kernel/pid_max", "w", encoding="ascii") as handle:
            handle.write(str(limit))
    finally:
        _umount("/proc")


def mount_scratch(scratch: str, limit_mb: int) -> None:
    """In B, in its private mount namespace: `scratch` becomes a tmpfs of `limit_mb` MiB holding a copy of the
    regular files the parent left there (a snippet's program); the parent's folder itself is never written. As
    root, the tmpfs and the copies belong to the unprivileged ids that B takes before running model code."""
    owner = kernel.model_code_ids()
    below = os.open(scratch, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        inodes = max(1024, limit_mb * SCRATCH_INODES_PER_MB)
        _mount(
            "tmpfs",
            scratch,
            "tmpfs",
            kernel.MS_NOSUID | kernel.MS_NODEV,
            f"size={limit_mb}m,nr_inodes={inodes},mode=0700,uid={owner[0]},gid={owner[1]}",
        )
        for name in os.listdir(below):
            _copy_regular_file(below, name, scratch, owner)
    finally:
        os.close(below)


def _copy_regular_file(source_dir: int, name: str, target_dir: str, owner: tuple[int, int]) -> None:
    try:
        source = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=source_dir)
    except OSError:
        return  # not a regular file we may read (a folder, a link): not part of the program
    try:
        info = os.fstat(source)
        if not stat.S_ISREG(info.st_mode):
            return
        target = os.open(
            os.path.join(target_dir, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, info.st_mode & 0o700
        )
        try:
            while chunk := os.read(source, 1 << 20):
                os.write(target, chunk)
            if owner != (os.geteuid(), os.getegid()):
                os.fchown(target, *owner)
        finally:
            os.close(target)
    finally:
        os.close(source)


@dataclass(frozen=True)
class NamespaceMounts:
    """What B made of its mount namespace before it knew its step: private propagation, the task limit."""

    private: bool
    task_limit: int
    reason: str  # why the mount namespace cannot be used, "" when it can


_NAMESPACE_MOUNTS: NamespaceMounts | None = None


def prepare_namespace() -> NamespaceMounts:
    """In B, once (a spare B does it before its step arrives): mount propagation made private, so nothing mounted
    later leaks back to the host, the PID namespace's task limit, and B in its memory cgroup (where there is one).
    Needs the mount namespace `supervise` made."""
    global _NAMESPACE_MOUNTS
    if _NAMESPACE_MOUNTS is None:
        _NAMESPACE_MOUNTS = _private_mount_namespace()
        enter_step_cgroup()  # its limit is set with the step's (`join_step_cgroup`)
    return _NAMESPACE_MOUNTS


def _private_mount_namespace() -> NamespaceMounts:
    if "mount" not in _SUPERVISED_NAMESPACES:
        return NamespaceMounts(False, 0, "no mount namespace")
    try:
        _mount(None, "/", None, kernel.MS_REC | kernel.MS_PRIVATE)
    except OSError as error:
        return NamespaceMounts(False, 0, str(error))
    try:
        limit_tasks()
    except OSError:
        return NamespaceMounts(True, 0, "")  # a kernel before 6.14 shares one pid_max: the timeout bounds a fork bomb
    return NamespaceMounts(True, TASK_LIMIT, "")


def prepare_mounts(scratch: str | None, scratch_limit_mb: int | None) -> tuple[bool, int, str]:
    """Step 1 in B: (scratch is a tmpfs, the task limit set or 0, why not where not)."""
    namespace = prepare_namespace()
    if not namespace.private:
        return False, 0, namespace.reason
    if not scratch or not scratch_limit_mb:
        return False, namespace.task_limit, "no scratch folder"
    in_scratch = os.path.realpath(os.getcwd()) == os.path.realpath(scratch)
    try:
        mount_scratch(scratch, scratch_limit_mb)
    except OSError as error:
        if os.path.ismount(scratch):
            raise  # mounted, but the parent's files could not be copied in: the program would be incomplete
        return False, namespace.task_limit, str(error)
    if in_scratch:
        os.chdir(scratch)  # onto the tmpfs: the old working directory is the folder beneath it
    return True, namespace.task_limit, ""


def own_writable_folders(writable: Sequence[str]) -> None:
    """As root: the folders model code may write (made by the parent; the scratch where it is no tmpfs) become
    the unprivileged ids' own, the one place they may write; the parent removes them whatever they hold."""
    owner = kernel.model_code_ids()
    if owner == (os.geteuid(), os.getegid()):
        return
    for folder in writable:
        if not os.path.ismount(folder):
            os.chown(folder, *owner, follow_symlinks=False)


# ---------------------------------------------------------------------------
# 2. Limits
# ---------------------------------------------------------------------------


def step_memory_limit_bytes(memory_mb: int, scratch_limit_mb: int | None) -> int:
    """What a step's processes hold together at most: the memory limit and the scratch (a tmpfs is memory)."""
    return (int(memory_mb) + int(scratch_limit_mb or 0)) * 1024 * 1024


def _name_step_cgroup() -> tuple[tuple[cgroups.Hierarchy, str] | None, str]:
    """In A, before B is forked: the memory cgroup of B's process tree (stale ones of earlier As removed)."""
    hierarchy, reason = cgroups.own_memory_cgroup()
    if hierarchy is None:
        return None, reason
    cgroups.sweep(hierarchy)
    return (hierarchy, cgroups.step_folder(hierarchy, os.getpid())), ""


_STEP_CGROUP_ENTERED = False


def enter_step_cgroup() -> bool:
    """In B, once (a spare B before its step): create the cgroup A named and move into it, without a limit yet.
    False when that is not possible here (`_STEP_CGROUP_REASON` then says why)."""
    global _STEP_CGROUP_REASON, _STEP_CGROUP_ENTERED
    if _STEP_CGROUP_ENTERED or _STEP_CGROUP is None:
        return _STEP_CGROUP_ENTERED
    hierarchy, folder = _STEP_CGROUP
    try:
        cgroups.enter(hierarchy, folder)
    except OSError as error:
        _STEP_CGROUP_REASON = f"cannot create one in {hierarchy.folder}: {error.strerror or error}"
        return False
    _STEP_CGROUP_ENTERED = True
    return True


def join_step_cgroup(memory_mb: int | None, scratch_limit_mb: int | None) -> str:
    """In B, while it may still write to the cgroup hierarchy: be in the cgroup A named (`enter_step_cgroup`) and
    limit it to `step_memory_limit_bytes`. Its name ("cgroup v1"), or "" when that is not possible here
    (`_STEP_CGROUP_REASON` then says why)."""
    global _STEP_CGROUP_REASON
    if _STEP_CGROUP is None or not memory_mb:
        _STEP_CGROUP_REASON = _STEP_CGROUP_REASON or "no memory limit"
        return ""
    if not enter_step_cgroup():
        return ""
    hierarchy, folder = _STEP_CGROUP
    try:
        cgroups.limit(hierarchy, folder, step_memory_limit_bytes(memory_mb, scratch_limit_mb))
    except OSError as error:  # in a cgroup without a limit, while the probe found one could be set: refuse
        raise ConfinementError(f"cannot limit the memory cgroup {folder}: {error.strerror or error}") from None
    return hierarchy.name


def apply_limits(memory_mb: int | None, scratch_limit_mb: int | None = None) -> None:
    """No core files; the address space (`memory_mb`); each file's size (`scratch_limit_mb`); and the descriptors
    (`DESCRIPTOR_LIMIT`), each of which can hold kernel buffers (a pipe's, a socket's) outside the address space."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = DESCRIPTOR_LIMIT if hard == resource.RLIM_INFINITY else min(DESCRIPTOR_LIMIT, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, limit), limit))
    if memory_mb:
        limit = int(memory_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if scratch_limit_mb:
        limit = int(scratch_limit_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


# ---------------------------------------------------------------------------
# All five steps, for the calling process
# ---------------------------------------------------------------------------


def enter_sandbox(
    read_paths: Sequence[str],
    write_paths: Sequence[str],
    memory_mb: int | None,
    abi: int | None = None,
    *,
    scratch: str | None = None,
    scratch_limit_mb: int | None = None,
    seccomp_binding: str | None = None,
) -> None:
    """Mounts (in the namespaces `supervise` made), limits, Landlock (when the kernel has it), no capabilities and
    the seccomp filter, in that order, for the calling process. `scratch` (writable, in `write_paths` or added)
    becomes a tmpfs of `scratch_limit_mb` where a mount namespace allows it."""
    prepare_seccomp(seccomp_binding)
    join_step_cgroup(memory_mb, scratch_limit_mb)
    writable = list(write_paths) + ([scratch] if scratch and scratch not in write_paths else [])
    prepare_mounts(scratch, scratch_limit_mb)
    own_writable_folders(writable)
    apply_limits(memory_mb, scratch_limit_mb)
    if abi is None:
        abi, _ = kernel.landlock_abi()
    if abi > 0:
        kernel.apply_landlock(list(read_paths), writable, abi)
    else:
        kernel.set_no_new_privs()
    kernel.drop_capabilities()
    kernel.install_seccomp()


# ---------------------------------------------------------------------------
# The supervising parent
# ---------------------------------------------------------------------------


def _children_of(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as handle:
                found.extend(int(child) for child in handle.read().split())
        except (OSError, ValueError):
            continue
    return found


def kill_descendants() -> None:
    """SIGKILL every descendant of this process (the subreaper's sweep), then reap them."""
    for _ in range(50):
        children = _children_of(os.getpid())
        if not children:
            break
        for child in children:
            try:
                os.kill(child, signal.SIGKILL)
            except OSError:
                pass
        _reap_all()
    _reap_all()


def _reap_all() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def supervise(run_confined: Callable[[], int], deadline: float | None = None) -> int:
    """Run `run_confined` in a child that is PID 1 of new namespaces (when possible) and return its exit
    code as a shell would (negative: killed by that signal). Every other descendant is killed when it ends, and
    at `deadline` (a `time.monotonic()` value) the child is killed if it still runs: the launcher's own bound,
    whatever happens to the process that started it.

    Called in the launching process (A); `run_confined` runs in B and must never return into A's code. The kernel
    makes a user namespace only for a process with one thread: a normal user's A that has more (a numeric
    library's thread pool, started at import) supervises from a fork of itself, which has one."""
    if os.geteuid() != 0 and _thread_count() > 1:
        return _supervise_from_a_fork(run_confined, deadline)
    return _supervise_here(run_confined, deadline)


def _supervise_from_a_fork(run_confined: Callable[[], int], deadline: float | None) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            kernel.load_libc().prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            exit_like(_supervise_here(run_confined, deadline))
        finally:
            os._exit(70)
    return os.waitstatus_to_exitcode(_wait_for(pid))


def _unshare_keeping_death_signal() -> tuple[str, str]:
    """`unshare_namespaces`, then this process's parent-death signal set again: entering a user namespace changes
    the credentials, which clears it. A parent that died meanwhile ends this process (nothing would kill it)."""
    libc = kernel.load_libc()
    death_signal = ctypes.c_int(0)
    libc.prctl(kernel.PR_GET_PDEATHSIG, ctypes.byref(death_signal), 0, 0, 0)
    parent = os.getppid()
    found = unshare_namespaces()
    if death_signal.value:
        libc.prctl(kernel.PR_SET_PDEATHSIG, death_signal.value, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(70)
    return found


def _supervise_here(run_confined: Callable[[], int], deadline: float | None = None) -> int:
    global _SUPERVISED_NAMESPACES, _SUPERVISED_NAMESPACES_REASON, _STEP_CGROUP, _STEP_CGROUP_REASON
    _STEP_CGROUP, _STEP_CGROUP_REASON = _name_step_cgroup()
    namespaces, reason = _unshare_keeping_death_signal()
    _SUPERVISED_NAMESPACES, _SUPERVISED_NAMESPACES_REASON = namespaces, reason
    libc = kernel.load_libc()
    libc.prctl(kernel.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            libc.prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            code = run_confined()
        except BaseException as error:  # noqa: BLE001 - B must never return into A
            try:
                os.write(2, f"[confine] {type(error).__name__}: {error}\n".encode("utf-8", "replace"))
            except OSError:
                pass
        finally:
            os._exit(code)
    status = _wait_for(pid, deadline)
    if not namespaces:
        kill_descendants()
    if _STEP_CGROUP is not None:  # one attempt, off the step's path: a cgroup still busy is a later A's to sweep
        cgroups.remove(_STEP_CGROUP[1], wait_seconds=0.0)
    return os.waitstatus_to_exitcode(status)


BACKSTOP_LINE = "\n[confine] stopped by the launcher's own time bound\n"


def _wait_for(pid: int, deadline: float | None = None) -> int:
    """The child's wait status; past `deadline` the child is killed (one line on stderr says so) and reaped."""
    while deadline is not None:
        waited, status = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return status
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            _kill_at_backstop(pid)
            break
        _sleep_until_exit(pid, min(remaining, BACKSTOP_POLL_SECONDS))
    while True:
        try:
            waited, status = os.waitpid(pid, 0)
        except InterruptedError:
            continue
        if waited == pid:
            return status


BACKSTOP_POLL_SECONDS = 1.0  # the longest wait between two looks at the child without a pidfd to wait on


def _sleep_until_exit(pid: int, seconds: float) -> None:
    """Sleep `seconds`, or less when the child exits first (a pidfd where the kernel and Python offer one)."""
    import select

    try:
        descriptor = os.pidfd_open(pid)
    except (AttributeError, OSError):
        time.sleep(min(seconds, 0.05))
        return
    try:
        select.select([descriptor], [], [], seconds)
    finally:
        os.close(descriptor)


def _kill_at_backstop(pid: int) -> None:
    try:
        os.write(2, BACKSTOP_LINE.encode("ascii"))
    except OSError:
        pass
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def exit_like(code: int) -> None:
    """Leave with `code` as returned by `supervise`: a signal death is passed on as the same signal."""
    if code < 0:
        if -code != signal.SIGKILL:  # SIGKILL has no handler to reset (signal.signal refuses it)
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code if code >= 0 else 128 - code)


# ---------------------------------------------------------------------------
# Probe
# ---------------------------------------------------------------------------

PROBE_SCRATCH_LIMIT_MB = 1
PROBE_MEMORY_MB = 256


class ProbeReport(TypedDict, total=False):
    """What B of the probe found it could do (JSON, read by `probe`)."""

    namespaces: str
    namespace_reason: str
    problems: list[str]
    scratch_tmpfs: bool
    task_limit: int
    scratch_reason: str
    capabilities_dropped: bool
    identity: str
    seccomp: bool
    memory_cgroup: str
    memory_cgroup_reason: str


def _probe_confined(scratch: str, write_fd: int) -> int:
    """In B of the probe: the real steps 1, 4 and 5 on a throw-away folder; what worked goes to `write_fd`."""
    problems: list[str] = []
    report: ProbeReport = {
        "namespaces": _SUPERVISED_NAMESPACES,
        "namespace_reason": _SUPERVISED_NAMESPACES_REASON,
        "problems": problems,
    }
    report["memory_cgroup"] = join_step_cgroup(PROBE_MEMORY_MB, PROBE_SCRATCH_LIMIT_MB)
    report["memory_cgroup_reason"] = "" if report["memory_cgroup"] else _STEP_CGROUP_REASON
    try:
        tmpfs, task_limit, reason = prepare_mounts(scratch, PROBE_SCRATCH_LIMIT_MB)
    except OSError as error:
        tmpfs, task_limit, reason = False, 0, str(error)
    report["scratch_tmpfs"], report["task_limit"], report["scratch_reason"] = tmpfs, task_limit, reason
    try:
        report["capabilities_dropped"] = kernel.drop_capabilities()
        report["identity"] = kernel.identity_line()
    except ConfinementError as error:
        problems.append(str(error))
    try:
        kernel.set_no_new_privs()
        report["seccomp"] = kernel.install_seccomp() and kernel.seccomp_mode() == 2
    except ConfinementError as error:
        report["seccomp"] = False
        problems.append(str(error))
    os.write(write_fd, json.dumps(report).encode("utf-8"))
    return 0


def probe(seccomp_binding: str | None = None) -> Confinement:
    """What a confined process gets here, found by doing it: a throw-away child supervises a B that runs the real
    steps on a throw-away folder, so that nothing sticks to this process."""
    abi, landlock_reason = kernel.landlock_abi()
    seccomp_reason = prepare_seccomp(seccomp_binding)
    scratch = tempfile.mkdtemp(prefix="scicode-confine-probe-")
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            os.close(read_fd)
            code = max(supervise(lambda: _probe_confined(scratch, write_fd)), 0)
        finally:
            os._exit(code)
    os.close(write_fd)
    chunks = []
    while chunk := os.read(read_fd, 65536):
        chunks.append(chunk)
    os.close(read_fd)
    _wait_for(pid)
    os.rmdir(scratch)
    try:
        report = json.loads(b"".join(chunks).decode("utf-8") or "{}")
    except ValueError:
        report = {}
    seccomp = bool(report.get("seccomp"))
    return Confinement(
        landlock_abi=abi,
        landlock_reason=landlock_reason,
        namespaces=str(report.get("namespaces", "")),
        namespace_reason=str(report.get("namespace_reason", "probe failed")),
        capabilities_dropped=bool(report.get("capabilities_dropped", False)),
        identity=str(report.get("identity", "")),
        seccomp=seccomp,
        seccomp_reason="" if seccomp else (seccomp_reason or "the filter did not load"),
        scratch_tmpfs=bool(report.get("scratch_tmpfs")),
        scratch_reason=str(report.get("scratch_reason", "probe failed")),
        task_limit=int(report.get("task_limit") or 0),
        memory_cgroup=str(report.get("memory_cgroup", "")),
        memory_cgroup_reason=str(report.get("memory_cgroup_reason", "probe failed")),
        problems=tuple(report.get("problems", ())),
    )


# ---------------------------------------------------------------------------
# Launcher: python confine.py [--read P] [--write P] [--scratch DIR --scratch-limit-mb N] [--memory-mb N]
#                             [--seccomp-binding PATH] [--timeout-seconds S] [--python] -- program args...
# ---------------------------------------------------------------------------


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    import argparse

    if "--" not in argv:
        raise SystemExit("confine: usage: confine.py [--read P] [--write P] [--memory-mb N] -- program [args...]")
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="confine.py")
    parser.add_argument("--read", action="append", default=[])
    parser.add_argument("--write", action="append", default=[])
    parser.add_argument("--scratch", default=None, help="the writable folder that becomes a size-limited tmpfs")
    parser.add_argument("--scratch-limit-mb", type=int, default=0)
    parser.add_argument("--memory-mb", type=int, default=0)
    parser.add_argument("--seccomp-binding", default=None, help="path of the pyseccomp module to load")
    parser.add_argument("--python", action="store_true", help="the command's arguments are for this interpreter")
    parser.add_argument(
        "--timeout-seconds", type=float, default=0.0, help="kill the program after this long (0: no bound)"
    )
    options = parser.parse_args(argv[:split])
    command = argv[split + 1 :]
    return options, [python_as_invoked()] + command if options.python else command


def python_as_invoked() -> str:
    """This interpreter as it was started (a venv's `bin/python`, not the base interpreter it links to: Python
    finds the venv's pyvenv.cfg next to the path it was started as)."""
    return sys.executable or os.path.realpath(sys.argv[0])


def _parse_probe(argv: list[str]) -> str | None:
    if len(argv) == 3 and argv[1] == "--seccomp-binding":
        return argv[2]
    return None


def main(argv: list[str] | None = None) -> None:
    started = time.monotonic()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--probe"]:
        print(json.dumps(probe(_parse_probe(argv)).as_record()))
        return
    options, command = _parse(argv)
    if not command:
        raise SystemExit("confine: no program given after --")
    scratch = os.path.abspath(options.scratch) if options.scratch else None
    read_paths = interpreter_read_paths() + options.read + options.write + ([scratch] if scratch else [])
    prepare_seccomp(options.seccomp_binding)  # here, so that every snippet's B inherits it ready

    def run_command() -> int:
        enter_sandbox(
            read_paths,
            options.write,
            options.memory_mb or None,
            scratch=scratch,
            scratch_limit_mb=options.scratch_limit_mb or None,
        )
        os.execv(command[0], command)
        return 127

    deadline = started + options.timeout_seconds if options.timeout_seconds > 0 else None
    exit_like(supervise(run_command, deadline))


if __name__ == "__main__":
    main()
