"""The kernel interfaces of confinement (`confine.py`): libc access, Landlock (step 3: what the interpreter needs to
read, the rules), capabilities (step 4) and the seccomp filter (step 5), each applied to the calling process.

Standalone like `confine.py` (standard library only), which loads this file by path: both run under
`python_binary` in the zygote's children, in fresh test processes and checkers, and as the snippet launcher.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import site
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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

CLONE_NEWTIME, CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS = 0x00000080, 0x00020000, 0x02000000, 0x04000000
CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x08000000, 0x10000000, 0x20000000, 0x40000000
# `clone` keeps the exit signal in its low byte, so CLONE_NEWTIME can only come through `unshare` (or `clone3`).
NAMESPACES = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
CLONE_NAMESPACE_FLAGS = tuple(1 << bit for bit in range(32) if NAMESPACES >> bit & 1)
UNSHARE_NAMESPACE_FLAGS = (*CLONE_NAMESPACE_FLAGS, CLONE_NEWTIME)
PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER, PR_CAPBSET_DROP, PR_SET_SECUREBITS = 38, 36, 24, 28
PR_SET_PDEATHSIG, PR_GET_PDEATHSIG, PR_GET_SECCOMP = 1, 2, 21
PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE = 47, 2
SECUREBITS_ALL_LOCKED = 0x2F  # NOROOT, NOROOT_LOCKED, NO_SETUID_FIXUP, NO_SETUID_FIXUP_LOCKED, KEEP_CAPS_LOCKED
LINUX_CAPABILITY_VERSION_3 = 0x20080522
LAST_CAPABILITY = 63
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 0x40000
MNT_DETACH = 2
AF_INET, AF_INET6 = 2, 10
ALLOWED_SOCKET_FAMILIES = (AF_INET, AF_INET6)  # harmless in a network namespace without interfaces; TCP: Landlock
SOCKET_FAMILY_BOUND = 64  # the kernel refuses families >= AF_MAX (46 in Linux 6.x) with EAFNOSUPPORT itself
LOW_32_BITS = 0xFFFFFFFF
WRITABLE_DEVICES = ("/dev/null",)

# What the seccomp filter refuses with EPERM, and why (the README's trust model lists the same groups); names
# this architecture does not have are skipped.
DENIED_SYSCALLS: tuple[tuple[str, str], ...] = (
    (
        "kernel keyrings: a key outlives the step and later processes of the user read it back",
        "add_key keyctl request_key",
    ),
    (
        "other processes' memory and descriptors",
        "ptrace process_vm_readv process_vm_writev process_madvise pidfd_getfd kcmp migrate_pages move_pages",
    ),
    ("kernel interfaces that exploits build on", "bpf perf_event_open userfaultfd"),
    ("io_uring, whose operations bypass seccomp", "io_uring_setup io_uring_enter io_uring_register"),
    (
        "memory outside the address-space limit: anonymous files, SysV shared memory and message queues hold pages "
        "that no mapping counts once written",
        "memfd_create memfd_secret shmget msgget",
    ),
    (
        "mounts and namespaces",
        "mount umount2 pivot_root chroot setns open_tree open_tree_attr move_mount fsopen fsconfig fsmount fspick "
        "mount_setattr listmount statmount",
    ),
    (
        "the kernel and the machine: modules, kexec, reboot, swap, clock, host name, quotas, accounting, kernel log",
        "kexec_load kexec_file_load init_module finit_module delete_module reboot swapon swapoff syslog acct quotactl "
        "quotactl_fd settimeofday clock_settime clock_adjtime adjtimex sethostname setdomainname vhangup "
        "lookup_dcookie uselib ustat sysfs nfsservctl",
    ),
    ("files opened by handle, past every path check", "open_by_handle_at name_to_handle_at"),
    ("I/O ports and segment descriptors", "iopl ioperm modify_ldt"),
    ("watching files other processes use", "fanotify_init inotify_init inotify_init1 inotify_add_watch"),
    (
        "file metadata an owner may change without any capability: modes, owners, times, extended attributes",
        "chmod fchmod fchmodat fchmodat2 chown fchown lchown fchownat chown32 fchown32 lchown32 "
        "utime utimes futimesat utimensat setxattr lsetxattr fsetxattr setxattrat removexattr lremovexattr "
        "fremovexattr removexattrat",
    ),
)
# System calls added since Linux 5.1 have one number on every architecture but alpha; these are newer than some
# libseccomp releases know by name.
UNIFIED_SYSCALL_NUMBERS = {
    "fchmodat2": 452,
    "statmount": 457,
    "listmount": 458,
    "setxattrat": 463,
    "removexattrat": 466,
    "open_tree_attr": 467,
}
# fcntl commands refused with EPERM: a lease makes every other open() of the file on the host wait the lease-break
# time; a directory notification watches what the host does there.
F_SETLEASE, F_NOTIFY = 1024, 1026
DENIED_FCNTL_COMMANDS = (F_SETLEASE, F_NOTIFY)
# ioctls refused with EPERM: the terminal's input queue and console, and the inode flags an owner may set
# (FS_IOC_SETFLAGS, its 32-bit form, FS_IOC_FSSETXATTR: append-only, no-dump, project ids).
FS_IOC_SETFLAGS, FS_IOC32_SETFLAGS, FS_IOC_FSSETXATTR = 0x40086602, 0x40046602, 0x401C5820
TIOCSTI, TIOCLINUX = 0x5412, 0x541C
DENIED_IOCTL_REQUESTS = (TIOCSTI, TIOCLINUX, FS_IOC_SETFLAGS, FS_IOC32_SETFLAGS, FS_IOC_FSSETXATTR)
# As root, a confined process runs as this uid and gid, which own nothing on the host (the overflow ids).
UNPRIVILEGED_ID = 65534
CAP_DAC_READ_SEARCH = 2

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


class ConfinementError(RuntimeError):
    """Confinement that was asked for could not be applied; the process must not run model code."""


# ---------------------------------------------------------------------------
# libc access
# ---------------------------------------------------------------------------

_LIBC: ctypes.CDLL | None = None
# The sonames of the libraries loaded here: `ctypes.util.find_library` runs `ldconfig -p` in a subprocess (tens of
# milliseconds, paid by every snippet), while the dynamic loader finds a soname in its cache by itself.
KNOWN_SONAMES = {"c": "libc.so.6", "seccomp": "libseccomp.so.2"}


def find_library(name: str) -> str | None:
    """`ctypes.util.find_library`, without its subprocess for the libraries of KNOWN_SONAMES."""
    soname = KNOWN_SONAMES.get(name)
    if soname is not None:
        try:
            ctypes.CDLL(soname)
            return soname
        except OSError:
            pass
    return _ORIGINAL_FIND_LIBRARY(name)


_ORIGINAL_FIND_LIBRARY = ctypes.util.find_library


def load_libc() -> ctypes.CDLL:
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(find_library("c"), use_errno=True)
        _LIBC.syscall.restype = ctypes.c_long
        _LIBC.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
        _LIBC.umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)
    return _LIBC


def errno_text() -> str:
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
        libc = load_libc()
    except OSError as error:
        return 0, f"no C library: {error}"
    version = libc.syscall(
        SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION)
    )
    if version < 0:
        return 0, f"Landlock unavailable: {errno_text()}"
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
    """The interpreter's prefixes (a venv's and its base's: pyvenv.cfg, bin/, lib/), its site-packages folders, the
    system library folders and a few /etc files. Folders that `.pth` files add are not granted: an editable install
    may point at a checkout that holds the data folder."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths.add(os.path.dirname(os.path.realpath(sys.executable)))
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
# 3. Landlock
# ---------------------------------------------------------------------------


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
            raise ConfinementError(f"landlock rule for {path}: {errno_text()}")
    finally:
        os.close(fd)


def apply_landlock(read_paths: Sequence[str], write_paths: Sequence[str], abi: int) -> None:
    """Restrict this process (and every process it starts) to the given paths; no TCP; scoped (by ABI)."""
    libc = load_libc()
    handled = _handled_fs(abi)
    attr = _RulesetAttr(
        handled,
        (NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 else 0,
        (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0,
    )
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise ConfinementError(f"landlock_create_ruleset: {errno_text()}")
    try:
        for path in read_paths:
            _add_path_rule(libc, ruleset, path, READ_RIGHTS, handled)
        for path in WRITABLE_DEVICES:
            _add_path_rule(libc, ruleset, path, FS_READ_FILE | FS_WRITE_FILE, handled)
        for path in write_paths:
            _add_path_rule(libc, ruleset, path, handled, handled)
        set_no_new_privs()
        if libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise ConfinementError(f"landlock_restrict_self: {errno_text()}")
    finally:
        os.close(ruleset)


def set_no_new_privs() -> None:
    if load_libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise ConfinementError(f"prctl(PR_SET_NO_NEW_PRIVS): {errno_text()}")


# ---------------------------------------------------------------------------
# 4. Capabilities
# ---------------------------------------------------------------------------


def _capability_sets() -> tuple[int, int]:
    """(effective, permitted) of this thread, 64 bits each; (0, 0) when they cannot be read."""
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if load_libc().capget(ctypes.byref(header), data) != 0:
        return 0, 0
    return data[0].effective | data[1].effective << 32, data[0].permitted | data[1].permitted << 32


def drop_capabilities() -> bool:
    """Whenever any capability is held (root, or a user namespace's owner): lock securebits, empty the bounding
    set and clear every capability; as root, also leave the root ids (`_leave_root`). False when there was none
    to drop."""
    effective, permitted = _capability_sets()
    is_root = os.geteuid() == 0
    if not is_root and not (effective or permitted):
        return False
    libc = load_libc()
    # NO_SETUID_FIXUP: leaving uid 0 below keeps the capability sets as they are until capset clears them.
    if libc.prctl(PR_SET_SECUREBITS, SECUREBITS_ALL_LOCKED, 0, 0, 0) != 0:
        raise ConfinementError(f"prctl(PR_SET_SECUREBITS): {errno_text()}")
    kept = (1 << CAP_DAC_READ_SEARCH) if is_root else 0
    for capability in range(LAST_CAPABILITY + 1):
        if kept >> capability & 1:
            continue
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0 and ctypes.get_errno() != errno.EINVAL:
            raise ConfinementError(f"prctl(PR_CAPBSET_DROP, {capability}): {errno_text()}")
    if is_root:
        _leave_root()
    _set_capabilities(kept)
    if kept and libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_DAC_READ_SEARCH, 0, 0) != 0:
        raise ConfinementError(f"prctl(PR_CAP_AMBIENT_RAISE): {errno_text()}")
    return True


def _leave_root() -> None:
    """Run as UNPRIVILEGED_ID (uid and gid, no supplementary groups): ids that own nothing on the host, so that
    no mode, owner, time or attribute of a host file is this process's to change. Reading keeps working through
    CAP_DAC_READ_SEARCH alone (the interpreter may live under a 0700 home), bounded by the Landlock read rules."""
    libc = load_libc()
    death_signal = ctypes.c_int(0)
    libc.prctl(PR_GET_PDEATHSIG, ctypes.byref(death_signal), 0, 0, 0)
    parent = os.getppid()
    try:
        os.setgroups([])
        os.setresgid(UNPRIVILEGED_ID, UNPRIVILEGED_ID, UNPRIVILEGED_ID)
        os.setresuid(UNPRIVILEGED_ID, UNPRIVILEGED_ID, UNPRIVILEGED_ID)
    except OSError as error:
        raise ConfinementError(f"leaving the root ids: {error}") from None
    # A change of ids clears the parent-death signal: set it again, then make sure the parent did not die between.
    if death_signal.value and libc.prctl(PR_SET_PDEATHSIG, death_signal.value, 0, 0, 0) != 0:
        raise ConfinementError(f"prctl(PR_SET_PDEATHSIG): {errno_text()}")
    if os.getppid() != parent:
        raise ConfinementError("the supervising process ended while this one left the root ids")


def model_code_ids() -> tuple[int, int]:
    """The uid and gid this process runs model code under once `drop_capabilities` is done: UNPRIVILEGED_ID as
    root of the host, else its own (a user namespace maps the user's own ids, never 0)."""
    if os.geteuid() == 0:
        return UNPRIVILEGED_ID, UNPRIVILEGED_ID
    return os.geteuid(), os.getegid()


def _set_capabilities(capabilities: int) -> None:
    """Effective, permitted and inheritable sets all `capabilities` (a bit mask below 2**64)."""
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    for index in (0, 1):
        word = capabilities >> (32 * index) & LOW_32_BITS
        data[index].effective = data[index].permitted = data[index].inheritable = word
    if load_libc().capset(ctypes.byref(header), data) != 0:
        raise ConfinementError(f"capset: {errno_text()}")


def identity_line() -> str:
    """Whose files this process may own, for the confinement line."""
    uid, gid = os.getuid(), os.getgid()
    if uid == UNPRIVILEGED_ID and gid == UNPRIVILEGED_ID and not os.getgroups():
        return f"ids {uid}:{gid} owning nothing on the host"
    return f"the user's own ids {uid}:{gid}"


# ---------------------------------------------------------------------------
# 5. Seccomp, through the system's libseccomp
# ---------------------------------------------------------------------------


@dataclass
class _SeccompState:
    prepared: bool = False
    filter: Any = None  # a pyseccomp.SyscallFilter, built once per process (a fork inherits it)
    reason: str = ""


_SECCOMP = _SeccompState()


def load_seccomp_binding(path: str | None) -> tuple[Any, str]:
    """The `pyseccomp` module: loaded from `path` (the pipeline's own copy) or, without one, imported from this
    interpreter's environment; (None, why not) when it or libseccomp is missing."""
    ctypes.util.find_library = find_library  # the binding looks its libraries up when it is loaded
    try:
        return _load_module("pyseccomp", path), ""
    except ModuleNotFoundError:
        return None, "the pyseccomp binding is not installed"
    except Exception as error:  # noqa: BLE001 - e.g. RuntimeError("Unable to find libseccomp")
        return None, f"seccomp binding unusable: {type(error).__name__}: {error}"[:300]
    finally:
        ctypes.util.find_library = _ORIGINAL_FIND_LIBRARY


def _load_module(name: str, path: str | None) -> Any:
    import importlib
    import importlib.util

    if not path:
        return importlib.import_module(name)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _native_number(seccomp: Any, name: str) -> int | None:
    """The system call's number on this architecture; None where it has none."""
    number = int(seccomp.resolve_syscall(seccomp.Arch.NATIVE, name))
    if number >= 0:
        return number
    return UNIFIED_SYSCALL_NUMBERS.get(name)


def _masked_equal(seccomp: Any, argument: int, mask: int, value: int) -> Any:
    return seccomp.Arg(argument, seccomp.MASKED_EQ, mask, value)


def build_filter(seccomp: Any) -> Any:
    """The filter of step 5 (see the module docstring), not loaded yet."""
    deny = seccomp.ERRNO(errno.EPERM)
    syscall_filter = seccomp.SyscallFilter(seccomp.ALLOW)
    syscall_filter.set_attr(seccomp.Attr.ACT_BADARCH, seccomp.KILL_PROCESS)
    syscall_filter.set_attr(seccomp.Attr.CTL_TSYNC, 1)  # every thread, should one exist already
    try:
        syscall_filter.set_attr(seccomp.Attr.CTL_OPTIMIZE, 2)  # a binary tree of system call numbers
    except OSError:
        pass
    for _, names in DENIED_SYSCALLS:
        for name in names.split():
            number = _native_number(seccomp, name)
            if number is not None:
                syscall_filter.add_rule(deny, number)
    clone3 = _native_number(seccomp, "clone3")
    if clone3 is not None:
        syscall_filter.add_rule(seccomp.ERRNO(errno.ENOSYS), clone3)
    # The kernel reads these arguments as 32-bit ints: compare the low 32 bits only, whatever the high ones hold.
    for family in range(SOCKET_FAMILY_BOUND):
        if family not in ALLOWED_SOCKET_FAMILIES:
            syscall_filter.add_rule(deny, "socket", _masked_equal(seccomp, 0, LOW_32_BITS, family))
    for request in DENIED_IOCTL_REQUESTS:
        syscall_filter.add_rule(deny, "ioctl", _masked_equal(seccomp, 1, LOW_32_BITS, request))
    for name in ("fcntl", "fcntl64"):
        if _native_number(seccomp, name) is not None:
            for command in DENIED_FCNTL_COMMANDS:
                syscall_filter.add_rule(deny, name, _masked_equal(seccomp, 1, LOW_32_BITS, command))
    for name, flags in (("clone", CLONE_NAMESPACE_FLAGS), ("unshare", UNSHARE_NAMESPACE_FLAGS)):
        for flag in flags:
            syscall_filter.add_rule(deny, name, _masked_equal(seccomp, 0, flag, flag))
    return syscall_filter


def prepare_seccomp(binding: str | None) -> str:
    """Load the binding and build the filter once per process (before Landlock: the binding's file may lie outside
    what model code may read); "" when ready, else why there is no filter."""
    if not _SECCOMP.prepared:
        _SECCOMP.prepared = True
        module, reason = load_seccomp_binding(binding)
        if module is not None:
            try:
                _SECCOMP.filter = build_filter(module)
            except Exception as error:  # noqa: BLE001 - an old libseccomp, an unknown architecture
                reason = f"libseccomp cannot build the filter: {type(error).__name__}: {error}"[:300]
        _SECCOMP.reason = reason
    return _SECCOMP.reason


def install_seccomp() -> bool:
    """Load the prepared filter into this process (and every process it starts); False when there is none."""
    if _SECCOMP.filter is None:
        return False
    try:
        _SECCOMP.filter.load()
    except OSError as error:
        raise ConfinementError(f"seccomp_load: {error}") from None
    return True


def seccomp_mode() -> int:
    """0: no seccomp, 1: strict, 2: a filter (prctl PR_GET_SECCOMP)."""
    return int(load_libc().prctl(PR_GET_SECCOMP, 0, 0, 0, 0))
