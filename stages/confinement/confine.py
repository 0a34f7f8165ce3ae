"""Kernel confinement of every process that runs model-written code (test processes, tool snippets).

Standalone on purpose (standard library only): it runs inside the zygote's children, inside fresh test
processes and as a launcher script (`python confine.py [options] -- program args...`) for tool snippets,
all under `python_binary`.

What a confined process gets, in this order (each step is skipped, and said so, where the kernel or
the privileges do not allow it):

1. *Namespaces.* The launching process (A) calls `unshare(CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC)`
   (with `CLONE_NEWUSER` when it is not root) and forks the confined process (B), which is PID 1 of a new
   PID namespace: when B ends, or when A and B are killed as a process group, the kernel kills every
   process left in the namespace, whatever session or group it moved to. The new network namespace has
   no interface but a loopback that is down: no TCP, UDP or raw socket reaches anything. A is also a
   child subreaper, so without namespaces orphaned descendants are reparented to A, which kills every
   one it can find when B ends.
2. *Limits.* RLIMIT_AS (memory), RLIMIT_CORE = 0.
3. *Landlock* (ABI >= 1): reads (and execution) only beneath the interpreter's prefixes, its
   site-packages, the system library folders, the few /etc files the C library and Python read, and
   the extra folders the caller names; writes only beneath the scratch folder (and /dev/null). No /proc,
   no /home or /root, no data folder, no targets file. ABI >= 4: no TCP bind or connect. ABI >= 6: no
   signal to a process outside the domain and no abstract unix socket outside it.
4. *Capabilities.* When running as root: securebits locked so that exec never regains them, the bounding
   set emptied, effective/permitted/inheritable sets cleared. `no_new_privs` is set in any case.

`probe()` (or `python confine.py --probe`) reports what this kernel and these privileges allow, as the
one-line `Confinement.description` that config.json and the summary carry.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import signal
import site
import sys
import sysconfig
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

# -- Linux constants (x86_64 and aarch64 share these syscall numbers) ---------------------------------
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_TRUNCATE, FS_IOCTL_DEV, FS_REFER = 1 << 14, 1 << 15, 1 << 13
FS_ABI1_ALL = (1 << 13) - 1
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
FILE_ONLY_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
READ_RIGHTS = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER, PR_CAPBSET_DROP, PR_SET_SECUREBITS = 38, 36, 24, 28
PR_SET_PDEATHSIG = 1
SECUREBITS_ALL_LOCKED = 0x2F  # NOROOT, NOROOT_LOCKED, NO_SETUID_FIXUP, NO_SETUID_FIXUP_LOCKED, KEEP_CAPS_LOCKED
LINUX_CAPABILITY_VERSION_3 = 0x20080522
LAST_CAPABILITY = 63

SYSTEM_READ_PATHS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/sys/devices/system/cpu")
SYSTEM_READ_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/mime.types",
    "/dev/urandom",
    "/dev/random",
    "/dev/zero",
)
SYSTEM_READ_FOLDERS_ETC = ("/etc/ld.so.conf.d", "/etc/alternatives", "/etc/fonts")
WRITABLE_DEVICES = ("/dev/null",)


class ConfinementError(RuntimeError):
    """Confinement that was asked for could not be applied; the process must not run model code."""


@dataclass(frozen=True)
class Confinement:
    """What this kernel and these privileges give a confined process."""

    landlock_abi: int = 0
    landlock_reason: str = ""
    namespaces: str = ""  # e.g. "pid+net+ipc", "" when unavailable
    namespace_reason: str = ""
    capabilities_dropped: bool = False
    problems: tuple[str, ...] = field(default_factory=tuple)

    @property
    def full(self) -> bool:
        """Filesystem, network and scope rules, and every descendant killed with its step."""
        return self.landlock_abi >= 6 and "pid" in self.namespaces

    @property
    def description(self) -> str:
        if self.landlock_abi <= 0 and not self.namespaces:
            reasons = "; ".join(reason for reason in (self.landlock_reason, self.namespace_reason) if reason)
            return f"none ({reasons or 'unavailable'})"
        parts = []
        if self.landlock_abi > 0:
            rules = ["fs"] + (["net"] if self.landlock_abi >= 4 else []) + (["scope"] if self.landlock_abi >= 6 else [])
            parts.append(f"landlock ABI {self.landlock_abi}, {'+'.join(rules)}")
        else:
            parts.append(f"no landlock ({self.landlock_reason})")
        if self.namespaces:
            parts.append(f"{self.namespaces} namespaces")
        else:
            parts.append(f"no namespaces ({self.namespace_reason}); descendants killed by a subreaper")
        if self.capabilities_dropped:
            parts.append("capabilities dropped")
        return ", ".join(parts)

    def as_record(self) -> dict:
        return dict(asdict(self), description=self.description, full=self.full)


# ---------------------------------------------------------------------------
# libc access
# ---------------------------------------------------------------------------

_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        _LIBC.syscall.restype = ctypes.c_long
    return _LIBC


def _errno_text() -> str:
    return os.strerror(ctypes.get_errno())


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def landlock_abi() -> tuple[int, str]:
    """(ABI version, "") or (0, why Landlock is unavailable)."""
    try:
        libc = _libc()
    except OSError as error:
        return 0, f"no C library: {error}"
    version = libc.syscall(
        SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION)
    )
    if version < 0:
        return 0, f"Landlock unavailable: {_errno_text()}"
    return int(version), ""


def _handled_fs(abi: int) -> int:
    rights = FS_ABI1_ALL
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


# ---------------------------------------------------------------------------
# What the interpreter needs to read
# ---------------------------------------------------------------------------


def interpreter_read_paths() -> list[str]:
    """The interpreter's prefixes and site-packages folders, the system library folders and a few /etc files."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        location = sysconfig.get_paths().get(name)
        if location:
            paths.add(location)
    try:
        paths.update(site.getsitepackages())
    except AttributeError:
        pass
    paths.update(SYSTEM_READ_PATHS)
    paths.update(SYSTEM_READ_FILES)
    paths.update(SYSTEM_READ_FOLDERS_ETC)
    return sorted(path for path in paths if path and os.path.exists(path))


# ---------------------------------------------------------------------------
# Applying confinement (in the process that will run model code)
# ---------------------------------------------------------------------------


def apply_limits(memory_mb: int | None) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_mb:
        limit = int(memory_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _add_path_rule(libc: ctypes.CDLL, ruleset: int, path: str, rights: int, handled: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not os.path.isdir(path):
            rights &= FILE_ONLY_RIGHTS
        rule = _PathBeneathAttr(rights & handled, fd)
        if (
            libc.syscall(
                SYS_LANDLOCK_ADD_RULE,
                ctypes.c_int(ruleset),
                ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH),
                ctypes.byref(rule),
                ctypes.c_uint32(0),
            )
            != 0
        ):
            raise ConfinementError(f"landlock rule for {path}: {_errno_text()}")
    finally:
        os.close(fd)


def apply_landlock(read_paths: Sequence[str], write_paths: Sequence[str], abi: int) -> None:
    """Restrict this process (and every process it starts) to the given paths; no TCP; scoped (by ABI)."""
    libc = _libc()
    handled = _handled_fs(abi)
    attr = _RulesetAttr(
        handled,
        (NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 else 0,
        (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0,
    )
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise ConfinementError(f"landlock_create_ruleset: {_errno_text()}")
    try:
        for path in read_paths:
            _add_path_rule(libc, ruleset, path, READ_RIGHTS, handled)
        for path in WRITABLE_DEVICES:
            _add_path_rule(libc, ruleset, path, FS_READ_FILE | FS_WRITE_FILE, handled)
        for path in write_paths:
            _add_path_rule(libc, ruleset, path, handled, handled)
        set_no_new_privs()
        if libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise ConfinementError(f"landlock_restrict_self: {_errno_text()}")
    finally:
        os.close(ruleset)


def set_no_new_privs() -> None:
    if _libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise ConfinementError(f"prctl(PR_SET_NO_NEW_PRIVS): {_errno_text()}")


def drop_capabilities() -> bool:
    """As root: lock securebits, empty the bounding set and clear every capability. False when not root."""
    if os.geteuid() != 0:
        return False
    libc = _libc()
    if libc.prctl(PR_SET_SECUREBITS, SECUREBITS_ALL_LOCKED, 0, 0, 0) != 0:
        raise ConfinementError(f"prctl(PR_SET_SECUREBITS): {_errno_text()}")
    for capability in range(LAST_CAPABILITY + 1):
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL: no such cap
            raise ConfinementError(f"prctl(PR_CAPBSET_DROP, {capability}): {_errno_text()}")
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        raise ConfinementError(f"capset: {_errno_text()}")
    return True


def enter_sandbox(
    read_paths: Sequence[str], write_paths: Sequence[str], memory_mb: int | None, abi: int | None = None
) -> None:
    """Limits, Landlock (when the kernel has it) and no capabilities, for the calling process."""
    apply_limits(memory_mb)
    if abi is None:
        abi, _ = landlock_abi()
    if abi > 0:
        apply_landlock(list(read_paths), list(write_paths), abi)
    else:
        set_no_new_privs()
    drop_capabilities()


# ---------------------------------------------------------------------------
# Namespaces and the supervising parent
# ---------------------------------------------------------------------------


def _unshare_flags() -> int:
    flags = CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC
    return flags if os.geteuid() == 0 else flags | CLONE_NEWUSER


def unshare_namespaces() -> tuple[str, str]:
    """New PID/network/IPC namespaces for the children of this process: ("pid+net+ipc", "") or ("", why not)."""
    try:
        libc = _libc()
    except OSError as error:
        return "", str(error)
    if libc.unshare(_unshare_flags()) != 0:
        return "", f"unshare: {_errno_text()}"
    return "pid+net+ipc", ""


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


def supervise(run_confined: Callable[[], int]) -> int:
    """Run `run_confined` in a child that is PID 1 of new namespaces (when possible) and return its exit
    code as a shell would (negative: killed by that signal). Every other descendant is killed when it ends.

    Called in the launching process (A); `run_confined` runs in B and must never return into A's code."""
    namespaces, _ = unshare_namespaces()
    libc = _libc()
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            code = run_confined()
        except BaseException as error:  # noqa: BLE001 - B must never return into A
            try:
                os.write(2, f"[confine] {type(error).__name__}: {error}\n".encode("utf-8", "replace"))
            except OSError:
                pass
        finally:
            os._exit(code)
    status = _wait_for(pid)
    if not namespaces:
        kill_descendants()
    return os.waitstatus_to_exitcode(status)


def _wait_for(pid: int) -> int:
    while True:
        try:
            waited, status = os.waitpid(pid, 0)
        except InterruptedError:
            continue
        if waited == pid:
            return status


def exit_like(code: int) -> None:
    """Leave with `code` as returned by `supervise`: a signal death is passed on as the same signal."""
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code if code >= 0 else 128 - code)


# ---------------------------------------------------------------------------
# Probe
# ---------------------------------------------------------------------------


def probe() -> Confinement:
    """What a confined process gets here: run in a throw-away child so that nothing sticks to this process."""
    abi, landlock_reason = landlock_abi()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        report: dict = {}
        try:
            namespaces, reason = unshare_namespaces()
            report.update(namespaces=namespaces, namespace_reason=reason)
            try:
                dropped = drop_capabilities()
                report["capabilities_dropped"] = dropped
            except ConfinementError as error:
                report["problems"] = [str(error)]
        finally:
            os.write(write_fd, json.dumps(report).encode("utf-8"))
            os._exit(0)
    os.close(write_fd)
    chunks = []
    while True:
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_fd)
    _wait_for(pid)
    try:
        report = json.loads(b"".join(chunks).decode("utf-8") or "{}")
    except ValueError:
        report = {}
    return Confinement(
        landlock_abi=abi,
        landlock_reason=landlock_reason,
        namespaces=str(report.get("namespaces", "")),
        namespace_reason=str(report.get("namespace_reason", "probe failed")),
        capabilities_dropped=bool(report.get("capabilities_dropped", False)),
        problems=tuple(report.get("problems", ())),
    )


# ---------------------------------------------------------------------------
# Launcher: python confine.py [--read P] [--write P] [--memory-mb N] [--python] -- program args...
# ---------------------------------------------------------------------------


def _parse(argv: list[str]) -> tuple[dict, list[str]]:
    import argparse

    if "--" not in argv:
        raise SystemExit("confine: usage: confine.py [--read P] [--write P] [--memory-mb N] -- program [args...]")
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="confine.py")
    parser.add_argument("--read", action="append", default=[])
    parser.add_argument("--write", action="append", default=[])
    parser.add_argument("--memory-mb", type=int, default=0)
    parser.add_argument("--python", action="store_true", help="the command's arguments are for this interpreter")
    options = parser.parse_args(argv[:split])
    command = argv[split + 1 :]
    return vars(options), [os.path.realpath(sys.executable)] + command if options.python else command


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["--probe"]:
        print(json.dumps(probe().as_record()))
        return
    options, command = _parse(argv)
    if not command:
        raise SystemExit("confine: no program given after --")
    read_paths = interpreter_read_paths() + options["read"] + options["write"]

    def run_command() -> int:
        enter_sandbox(read_paths, options["write"], options["memory_mb"] or None)
        os.execv(command[0], command)
        return 127

    exit_like(supervise(run_command))


if __name__ == "__main__":
    main()
