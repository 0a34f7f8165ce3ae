"""The test harness: the program that runs one step's test script inside the test process.

Standalone on purpose (standard library plus the numeric packages): it runs under
`settings.python_binary`, either forked from the warm zygote (`zygote.py`) or as a fresh process
(`python harness.py --channel-fd N ...`). It talks to the scoring engine over one inherited socket
(length-prefixed frames, see `read_frame`/`write_frame`), never over stdout/stderr.

Why a step's verdict can be trusted
-----------------------------------
The official evaluator execs `deps + code + targets + tests` in one process and calls exit code 0 a
pass, so code under test can pass by exiting early, by replacing `np.allclose`, or by reading
`targets`. Here:

1. *Two threads.* The main thread holds everything that matters (the channel, the per-run nonce,
   the snapshots, the targets once fetched). Code under test - the step code and every part of a
   test cell that calls it - runs in short-lived worker threads started with
   `_thread.start_new_thread` through a trampoline whose globals are empty, so frame walking from
   code under test (`sys._getframe`, `f_back`, tracebacks, `inspect`) reaches only its own frames
   and the trampoline's. The main thread waits until no worker (and no thread started by code under
   test) is alive before it fetches a target.
2. *No target before the model calls are done.* Each test cell is split by `rewrite.py`: every
   subexpression that does not involve `target` is evaluated first, in a worker, into temporaries;
   the remaining statements (`assert np.allclose(t0, target)`) run in the main thread in a fresh
   namespace holding only the temporaries and the target. Before the target is fetched, every
   temporary must be library data (builtin scalars and containers, numpy/scipy/sympy objects, checked
   recursively) or a library function present when the harness sealed itself, or a function the test
   cell itself defined (rebuilt over checked globals); so only library code sees the target.
3. *Targets come from the engine, once.* The engine (parent) reads the HDF5 file with our
   `scicode.parse.parse` and serves test i's target over the channel at most once; a request without
   the nonce, or a second request for the same test, fails the step ("targets read outside the test
   harness"). The targets file is never opened in this process (the audit hook refuses it anyway).
4. *Integrity snapshots.* After the dependencies are imported and before any code under test runs,
   the harness records the identity of every function, class and module bound in the numeric and
   comparison modules (builtins, numpy, scipy, sympy, mpmath, math, cmath, operator, functools,
   itertools, our `scicode` helpers, all their submodules) and in `sys.modules`, the class
   dictionaries of their Python-level classes, and the names the dependencies bound in the script
   namespace. They are checked after the step code and after every test cell (and class
   dictionaries for every value that reaches a comparison); any change is `fail` "replaced <name>".
5. *An audit hook* (irremovable) refuses, once sealed: opening the targets file, any HDF5 file,
   `/proc/<pid>/{fd,fdinfo,mem,environ,...}` or `/dev/fd`; writing or deleting outside the scratch
   folder; ctypes; new processes (subprocess, os.system, exec*, spawn*, fork); signals (os.kill,
   killpg, pthread_kill); gc.get_objects/get_referrers/get_referents; sys.settrace/setprofile/
   _current_frames/addaudithook; resource.setrlimit; changing `__code__`/`__defaults__`/
   `__kwdefaults__` of library functions; compiling code under the harness's own file names. A refused
   event is recorded, so catching the exception does not help: the step fails naming the event.
6. *Proof of completion.* Per-test results and a final completion record go to the engine with the
   nonce. `SystemExit` (exit, sys.exit, quit) inside code under test is caught in the worker and
   fails the step; `os._exit`, signals and crashes end the process without a completion record. The
   harness leaves with `os._exit`, so atexit handlers of code under test never run. The engine's
   verdict needs the completion record, every test passed, and exit code 0.

Known limits (documented, not hidden): code under test shares the interpreter, so a program written
against this harness's internals might still find ways we did not think of; C-level threads of
extension modules are not counted; `signal.signal` is unavailable to code under test (it runs in a
worker thread).
"""
from __future__ import annotations

import _thread
import argparse
import builtins
import json
import os
import pickle
import sys
import threading
import time
import traceback
import types
from typing import Any, Callable

HARNESS_FILENAME_PREFIX = "<scicode-"
PROTOCOL_VERSION = 1
HEADER_BYTES = 8
MAX_FRAME_BYTES = 1 << 34
TRUSTED_PACKAGES = ("numpy", "scipy", "sympy", "mpmath", "h5py", "scicode", "_scicode_compat")
TRUSTED_MODULES = ("builtins", "math", "cmath", "operator", "_operator", "functools", "_functools", "itertools")
PRELOADED = (
    "numpy", "numpy.linalg", "numpy.fft", "numpy.random", "scipy", "scipy.integrate", "scipy.optimize",
    "scipy.linalg", "scipy.sparse", "scipy.sparse.linalg", "scipy.special", "scipy.interpolate",
    "scipy.signal", "scipy.constants", "scipy.spatial", "scipy.spatial.distance", "scipy.fft", "scipy.stats",
    "sympy", "math", "cmath", "itertools", "functools", "copy", "random", "collections",
    "scicode.parse.parse", "scicode.compare.cmp", "h5py",
)
BUILTIN_DATA_TYPES = (int, float, complex, bool, str, bytes, type(None), list, tuple, dict, set, frozenset,
                      range, slice, type(Ellipsis))
HEAPTYPE_FLAG = 1 << 9
VALUE_CHECK_BUDGET = 2_000_000
THREAD_SETTLE_SECONDS = 2.0
PROC_SECRETS = {"fd", "fdinfo", "mem", "environ", "map_files", "root", "cwd", "task", "pagemap", "syscall", "auxv"}
DENIED_EVENTS = {
    "subprocess.Popen": "starting a process", "os.system": "starting a process", "os.exec": "starting a process",
    "os.posix_spawn": "starting a process", "os.spawn": "starting a process", "os.fork": "forking",
    "os.forkpty": "forking", "pty.spawn": "starting a process", "os.startfile": "starting a process",
    "os.kill": "sending a signal", "os.killpg": "sending a signal", "signal.pthread_kill": "sending a signal",
    "gc.get_objects": "scanning the heap", "gc.get_referrers": "scanning the heap",
    "gc.get_referents": "scanning the heap", "sys.settrace": "tracing", "sys.setprofile": "profiling",
    "sys._current_frames": "reading other threads' frames", "sys._current_exceptions": "reading other threads' frames",
    "sys.addaudithook": "adding an audit hook", "resource.setrlimit": "changing resource limits",
    "resource.prlimit": "changing resource limits", "os.link": "hard-linking a file",
    "socket.connect": "network access", "socket.bind": "network access",
}
WRITE_EVENTS = {"os.remove", "os.rmdir", "os.rename", "shutil.rmtree", "os.truncate", "os.chmod", "os.chown",
                "os.symlink", "os.utime", "os.mkdir", "shutil.move", "shutil.copyfile", "shutil.copytree"}
PROTECTED_FUNCTION_ATTRIBUTES = {"__code__", "__defaults__", "__kwdefaults__"}


# ---------------------------------------------------------------------------
# Framing (shared with the engine)
# ---------------------------------------------------------------------------

def write_frame(fd: int, payload: bytes) -> None:
    data = len(payload).to_bytes(HEADER_BYTES, "big") + payload
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _read_exact(fd: int, count: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < count:
        chunk = os.read(fd, min(count - len(chunks), 1 << 20))
        if not chunk:
            raise EOFError("channel closed")
        chunks.extend(chunk)
    return bytes(chunks)


def read_frame(fd: int) -> bytes:
    size = int.from_bytes(_read_exact(fd, HEADER_BYTES), "big")
    if size > MAX_FRAME_BYTES:
        raise ValueError(f"frame of {size} bytes refused")
    return _read_exact(fd, size)


# ---------------------------------------------------------------------------
# Process set-up
# ---------------------------------------------------------------------------

def runtime_dir() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime")


def preload(extra: tuple[str, ...] = ()) -> list[str]:
    """Put the helper folder on sys.path, install the compatibility shims and import the usual modules."""
    folder = runtime_dir()
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import importlib

    import _scicode_compat

    _scicode_compat.install()
    missing = []
    for name in PRELOADED + tuple(extra):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module that cannot be imported fails later, in its cell
            missing.append(name)
    return missing


def environment_versions() -> dict[str, str]:
    """Interpreter and library versions (part of the verdict cache key)."""
    versions = {"python": sys.version.split()[0], "implementation": sys.implementation.name, "executable": sys.executable}
    for name in ("numpy", "scipy", "sympy", "mpmath", "h5py"):
        module = sys.modules.get(name)
        if module is None:
            try:
                module = __import__(name)
            except Exception:  # noqa: BLE001
                versions[name] = "absent"
                continue
        versions[name] = str(getattr(module, "__version__", "unknown"))
    return versions


def apply_memory_limit(memory_mb: int | None) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_mb:
        limit = int(memory_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


# ---------------------------------------------------------------------------
# Snapshots
# ---------------------------------------------------------------------------

def _is_trusted_module_name(name: str) -> bool:
    return name in TRUSTED_MODULES or name.split(".")[0] in TRUSTED_PACKAGES


def _is_code_like(value: Any) -> bool:
    return isinstance(value, types.ModuleType) or isinstance(value, type) or callable(value)


def _all_classes() -> list[type]:
    seen: set[int] = set()
    found: list[type] = []
    stack: list[type] = [object]
    while stack:
        cls = stack.pop()
        try:
            subclasses = type.__subclasses__(cls) if cls is not type else type.__subclasses__(type)
        except TypeError:
            continue
        for sub in subclasses:
            if id(sub) not in seen:
                seen.add(id(sub))
                found.append(sub)
                stack.append(sub)
    return found


class Snapshot:
    """Identities recorded before any code under test runs."""

    def __init__(self, namespace: dict[str, Any], test_code_names: set[str]) -> None:
        self.modules_dict = sys.modules
        self.modules: dict[str, tuple[types.ModuleType, dict[str, Any]]] = {}
        trusted_callables: dict[int, Any] = {}
        for name, module in list(sys.modules.items()):
            if module is None or not _is_trusted_module_name(name):
                continue
            bound = {}
            for attribute, value in list(vars(module).items()):
                if _is_code_like(value):
                    bound[attribute] = value
                    if callable(value):
                        trusted_callables[id(value)] = value
            self.modules[name] = (module, bound)
        self.trusted_callables = trusted_callables
        self.trusted_module_ids = {id(module) for module, _ in self.modules.values()}
        data_types: dict[int, type] = {id(cls): cls for cls in BUILTIN_DATA_TYPES}
        self.class_dicts: dict[int, dict[str, Any]] = {}
        for cls in _all_classes():
            module_name = getattr(cls, "__module__", None)
            if not isinstance(module_name, str) or module_name.split(".")[0] not in TRUSTED_PACKAGES:
                continue
            data_types[id(cls)] = cls
            if cls.__flags__ & HEAPTYPE_FLAG:
                self.class_dicts[id(cls)] = dict(cls.__dict__)
        self.data_types = data_types
        self.builtins_dict = dict(vars(builtins))
        # Names the dependencies bound to modules (np, sp, la, ...): code under test must not rebind them.
        self.namespace = {name: value for name, value in namespace.items() if isinstance(value, types.ModuleType)}
        self.test_code_names = test_code_names

    # -- checks ---------------------------------------------------------------
    def replaced_library_name(self) -> str | None:
        if sys.modules is not self.modules_dict:
            return "sys.modules"
        for name, (module, bound) in self.modules.items():
            if self.modules_dict.get(name) is not module:
                return f"module {name} in sys.modules"
            current = vars(module)
            for attribute, value in bound.items():
                if current.get(attribute) is not value:
                    return f"{name}.{attribute}"
        return None

    def replaced_namespace_name(self, namespace: dict[str, Any], exempt: set[str]) -> str | None:
        if namespace.get("__builtins__") is not builtins:
            return "__builtins__"
        for name, value in self.namespace.items():
            if name in exempt or name == "__builtins__":
                continue
            if namespace.get(name, _MISSING) is not value:
                return name
        return None

    def accept_names(self, namespace: dict[str, Any], names: set[str]) -> None:
        """A test cell may rebind a checked name itself (`import numpy as np`, `sys = block`)."""
        for name in names & set(self.namespace):
            value = namespace.get(name, _MISSING)
            if isinstance(value, types.ModuleType):
                self.namespace[name] = value
            else:
                self.namespace.pop(name, None)

    def changed_class(self, cls: type) -> str | None:
        for klass in type.__dict__["__mro__"].__get__(cls):
            snapshot = self.class_dicts.get(id(klass))
            if snapshot is None:
                continue
            current = type.__dict__["__dict__"].__get__(klass)
            for key, value in snapshot.items():
                if _is_code_like(value) or isinstance(value, (property, classmethod, staticmethod)):
                    if current.get(key, _MISSING) is not value:
                        return f"{klass.__module__}.{klass.__qualname__}.{key}"
            for key in current:
                if key not in snapshot and key.startswith("__") and key.endswith("__"):
                    return f"{klass.__module__}.{klass.__qualname__}.{key}"
        return None


_MISSING = object()


class UntrustedValue(Exception):
    """A value that must not meet the target."""


class ValueChecker:
    """Walks a temporary and rejects anything whose methods could be code under test."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.budget = VALUE_CHECK_BUDGET
        self.numpy = sys.modules.get("numpy")
        self.sympy_basic = getattr(sys.modules.get("sympy"), "Basic", None)
        sparse = sys.modules.get("scipy.sparse")
        self.sparse_base = getattr(sparse, "spmatrix", None), getattr(sparse, "sparray", None)
        self.checked_classes: set[int] = set()

    def check(self, value: Any, label: str) -> None:
        self._check(value, label, 0)

    def _class_ok(self, cls: type, label: str) -> None:
        if id(cls) not in self.snapshot.data_types:
            name = getattr(cls, "__qualname__", "?")
            raise UntrustedValue(f"{label} is a {name} object defined after the harness started (only library data may meet the target)")
        if id(cls) not in self.checked_classes:
            changed = self.snapshot.changed_class(cls)
            if changed:
                raise UntrustedValue(f"replaced {changed}")
            self.checked_classes.add(id(cls))

    def _check(self, value: Any, label: str, depth: int) -> None:
        self.budget -= 1
        if self.budget < 0 or depth > 200:
            raise UntrustedValue(f"{label} is too large or deep to verify")
        cls = type(value)
        self._class_ok(cls, label)
        if cls in (int, float, complex, bool, str, bytes, type(None), range, slice, type(Ellipsis)):
            return
        if isinstance(value, dict):
            for key, item in dict.items(value):
                self._check(key, label, depth + 1)
                self._check(item, label, depth + 1)
            return
        if isinstance(value, (list, tuple, set, frozenset)):
            iterate = {list: list.__iter__, tuple: tuple.__iter__, set: set.__iter__, frozenset: frozenset.__iter__}
            base = next(kind for kind in (list, tuple, set, frozenset) if isinstance(value, kind))
            for item in iterate[base](value):
                self._check(item, label, depth + 1)
            return
        numpy = self.numpy
        if numpy is not None and isinstance(value, numpy.ndarray):
            if value.dtype.hasobject:
                for item in numpy.ndarray.ravel(value).tolist():
                    self._check(item, label, depth + 1)
            return
        if numpy is not None and isinstance(value, numpy.generic):
            if value.dtype.hasobject:
                self._check(value.item(), label, depth + 1)
            return
        if self.sympy_basic is not None and isinstance(value, self.sympy_basic):
            for item in value.args:
                self._check(item, label, depth + 1)
            return
        if any(base is not None and isinstance(value, base) for base in self.sparse_base):
            data = getattr(value, "data", None)
            if data is not None:
                self._check(data, label, depth + 1)


# ---------------------------------------------------------------------------
# Audit hook
# ---------------------------------------------------------------------------

class AuditPolicy:
    """State of the audit hook; `sealed` flips once, before the first line of code under test."""

    def __init__(self, targets_file: str | None, scratch: str, library_dirs: tuple[str, ...]) -> None:
        self.sealed = False
        self.violations: list[str] = []
        self.targets_file = os.path.realpath(targets_file) if targets_file else None
        self.scratch = os.path.realpath(scratch)
        self.library_dirs = library_dirs
        self.guard = threading.local()

    def record(self, message: str) -> None:
        if len(self.violations) < 20:
            self.violations.append(message)
        raise PermissionError(f"blocked by the SciCode test harness: {message}")

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.sealed:
            return
        if getattr(self.guard, "active", False):
            return
        self.guard.active = True
        try:
            self._decide(event, args)
        finally:
            self.guard.active = False

    def _decide(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            self._check_open(args)
        elif event == "scicode.hdf5.open":
            name = os.fsdecode(args[0]) if args and isinstance(args[0], (str, bytes)) else repr(args[:1])
            self.record(f"open {name!r} with h5py (an HDF5 file)")
        elif event in DENIED_EVENTS:
            self.record(f"{event} ({DENIED_EVENTS[event]})")
        elif event.startswith("ctypes."):
            self.record(f"{event} (ctypes)")
        elif event.startswith(("os.exec", "os.spawn", "os.posix_spawn")):
            self.record(f"{event} (starting a process)")
        elif event in WRITE_EVENTS:
            written = args[1:2] if event in ("os.symlink", "shutil.copyfile", "shutil.copytree") else args[:2]
            for path in written:
                if isinstance(path, (str, bytes, os.PathLike)) and not self._in_scratch(path):
                    self.record(f"{event} {os.fsdecode(path)!r} (outside the scratch folder)")
        elif event in ("object.__setattr__", "object.__delattr__"):
            self._check_setattr(event, args)
        elif event in ("compile", "code.__new__"):
            filename = args[1] if len(args) > 1 else None
            if isinstance(filename, (str, bytes)) and os.fsdecode(filename).startswith(HARNESS_FILENAME_PREFIX):
                self.record(f"{event} under the harness's file name {os.fsdecode(filename)!r}")

    def _in_scratch(self, path: Any) -> bool:
        real = os.path.realpath(os.fsdecode(path))
        return real == self.scratch or real.startswith(self.scratch + os.sep) or real == os.devnull

    def _check_open(self, args: tuple[Any, ...]) -> None:
        path, mode, flags = (tuple(args) + (None, None, None))[:3]
        if isinstance(path, int) or path is None:
            return
        text = os.fsdecode(path)
        real = os.path.realpath(text)
        lowered = real.lower()
        if self.targets_file and real == self.targets_file:
            self.record(f"open {text!r} (the targets file)")
        if lowered.endswith((".h5", ".hdf5", ".he5")):
            self.record(f"open {text!r} (an HDF5 file)")
        for candidate in (text, real):
            parts = candidate.split("/")
            if len(parts) > 3 and parts[1] == "proc" and (parts[2].isdigit() or parts[2] in ("self", "thread-self")):
                if parts[3] in PROC_SECRETS:
                    self.record(f"open {text!r} (process internals)")
            if candidate.startswith(("/dev/fd", "/dev/mem", "/dev/kmem", "/dev/stdin")):
                self.record(f"open {text!r} (process internals)")
        writing = (isinstance(mode, str) and any(flag in mode for flag in "wax+")) or (
            isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
        )
        if writing and not self._in_scratch(text):
            self.record(f"open {text!r} for writing (outside the scratch folder)")

    def _check_setattr(self, event: str, args: tuple[Any, ...]) -> None:
        if len(args) < 2 or args[1] not in PROTECTED_FUNCTION_ATTRIBUTES:
            return
        target = args[0]
        code = getattr(target, "__code__", None) if isinstance(target, types.FunctionType) else None
        filename = getattr(code, "co_filename", "") or ""
        if filename.startswith(HARNESS_FILENAME_PREFIX) or any(filename.startswith(folder) for folder in self.library_dirs):
            self.record(f"changing {args[1]} of {getattr(target, '__qualname__', '?')} ({event})")


def library_directories() -> tuple[str, ...]:
    folders = {os.path.dirname(os.__file__), runtime_dir(), os.path.dirname(os.path.abspath(__file__))}
    for name in ("numpy", "scipy", "sympy", "mpmath"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            folders.add(os.path.dirname(os.path.dirname(module.__file__)))
    return tuple(sorted(folder + os.sep for folder in folders))


# ---------------------------------------------------------------------------
# Kernel-level protection of the targets file (Landlock) and an h5py tripwire
# ---------------------------------------------------------------------------

LANDLOCK_CREATE_RULESET, LANDLOCK_ADD_RULE, LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_ACCESS_FS_READ_FILE = 1 << 2
LANDLOCK_RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38


def forbid_reading(path: str | None) -> str:
    """Make `path` unreadable for this thread and every thread it starts (Linux Landlock).

    Landlock only grants, so every file and folder beside each component of the path is granted
    read access and the path itself is not. Returns a short status ("landlock", or why not).
    """
    if not path or not os.path.exists(path):
        return "no targets file"
    try:
        import ctypes
    except ImportError:
        return "unavailable: no ctypes"

    class RulesetAttr(ctypes.Structure):
        _fields_ = [("handled_access_fs", ctypes.c_uint64)]

    class PathBeneathAttr(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    attr = RulesetAttr(LANDLOCK_ACCESS_FS_READ_FILE)
    ruleset = libc.syscall(LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        return f"unavailable: {os.strerror(ctypes.get_errno())}"
    try:
        real = os.path.realpath(path)
        parts = [part for part in real.split(os.sep) if part]
        folder = os.sep
        for part in parts:
            for entry in os.listdir(folder):
                if entry == part:
                    continue
                try:
                    fd = os.open(os.path.join(folder, entry), os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    rule = PathBeneathAttr(LANDLOCK_ACCESS_FS_READ_FILE, fd)
                    libc.syscall(LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH),
                                 ctypes.byref(rule), ctypes.c_uint32(0))
                finally:
                    os.close(fd)
            folder = os.path.join(folder, part)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return f"unavailable: prctl {os.strerror(ctypes.get_errno())}"
        if libc.syscall(LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            return f"unavailable: {os.strerror(ctypes.get_errno())}"
    finally:
        os.close(ruleset)
    return "landlock"


def install_hdf5_tripwire() -> None:
    """Every h5py file open raises the audit event `scicode.hdf5.open`, which the sealed hook refuses.

    h5py opens files inside the HDF5 C library, which Python's `open` audit event never sees."""
    try:
        import h5py.h5f as h5f
    except ImportError:
        return
    if getattr(h5f.open, "__scicode_tripwire__", False):
        return
    original = h5f.open

    def open_with_audit(name: Any, *args: Any, **kwargs: Any) -> Any:
        sys.audit("scicode.hdf5.open", name)
        return original(name, *args, **kwargs)

    open_with_audit.__scicode_tripwire__ = True  # type: ignore[attr-defined]
    h5f.open = open_with_audit


# ---------------------------------------------------------------------------
# Running code under test in a worker thread
# ---------------------------------------------------------------------------

_TRAMPOLINE_SOURCE = '''
def trampoline(code, namespace, box, done):
    try:
        exec(code, namespace)
        box["outcome"] = "ok"
    except BaseException as error:
        box["outcome"] = "exit" if isinstance(error, SystemExit) else "error"
        try:
            box["text"] = "".join(format_exception(type(error), error, error.__traceback__))
        except BaseException:
            box["text"] = "(the exception could not be formatted)"
        box["summary"] = short(error)
        error = None
    finally:
        done.release()
'''


def _short_exception(error: BaseException) -> str:
    try:
        text = str(error)
    except BaseException:  # noqa: BLE001
        text = ""
    name = type(error).__name__
    if isinstance(error, SystemExit):
        return f"SystemExit({error.code!r})"
    return f"{name}: {text[:300]}" if text else name


def _make_trampoline() -> Callable[..., None]:
    namespace: dict[str, Any] = {"__builtins__": builtins, "format_exception": traceback.format_exception,
                                 "short": _short_exception}
    exec(compile(_TRAMPOLINE_SOURCE, f"{HARNESS_FILENAME_PREFIX}trampoline>", "exec"), namespace)
    return namespace.pop("trampoline")


def run_in_worker(trampoline: Callable[..., None], code: types.CodeType, namespace: dict[str, Any]) -> dict[str, str]:
    box: dict[str, str] = {}
    done = _thread.allocate_lock()
    done.acquire()
    _thread.start_new_thread(trampoline, (code, namespace, box, done))
    done.acquire()
    return {key: str(value) for key, value in dict(box).items() if isinstance(value, str)}


def wait_for_threads(baseline: int) -> bool:
    deadline = time.monotonic() + THREAD_SETTLE_SECONDS
    while _thread._count() > baseline:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


# ---------------------------------------------------------------------------
# The harness
# ---------------------------------------------------------------------------

class StepFailed(Exception):
    """Ends the step early; `kind` names the report sent to the engine."""

    def __init__(self, kind: str, reason: str, test: int | None = None) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason
        self.test = test


class Harness:
    def __init__(self, fd: int, spec: dict[str, Any]) -> None:
        self.fd = fd
        self._nonce = spec["nonce"]
        self.spec = spec
        self.stderr = sys.stderr

    # -- reporting --------------------------------------------------------------
    def send(self, record: dict[str, Any]) -> None:
        record = dict(record, nonce=self._nonce)
        write_frame(self.fd, json.dumps(record).encode("utf-8"))

    def fetch_target(self, index: int) -> Any:
        self.send({"type": "fetch", "test": index})
        reply = read_frame(self.fd)
        if reply[:1] == b"T":
            return pickle.loads(reply[1:])
        raise StepFailed("refused", reply[1:].decode("utf-8", "replace") or "target refused", index)

    def write_stderr(self, text: str) -> None:
        try:
            self.stderr.write(text if text.endswith("\n") else text + "\n")
            self.stderr.flush()
        except Exception:  # noqa: BLE001
            pass


def _compile(source: str, label: str) -> types.CodeType:
    return compile(source, f"{HARNESS_FILENAME_PREFIX}{label}>", "exec", dont_inherit=True)


def _code_objects(code: types.CodeType) -> set[int]:
    found = {id(code)}
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            found |= _code_objects(constant)
    return found


def _referenced_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _referenced_names(constant)
    return names


class TestFunctionRebuilder:
    """Functions a test cell defines (e.g. `are_equivalent`) may meet the target: they are rebuilt
    over a namespace of checked values, so a later rebinding by code under test cannot reach them."""

    def __init__(self, checker: ValueChecker, snapshot: Snapshot, test_codes: set[int]) -> None:
        self.checker = checker
        self.snapshot = snapshot
        self.test_codes = test_codes

    def is_test_function(self, value: Any) -> bool:
        return type(value) is types.FunctionType and id(value.__code__) in self.test_codes

    def rebuild(self, function: types.FunctionType, namespace: dict[str, Any], label: str,
                done: dict[int, Any] | None = None) -> types.FunctionType:
        done = {} if done is None else done
        if id(function) in done:
            return done[id(function)]
        if function.__closure__:
            raise UntrustedValue(f"{label}: test function {function.__name__} has a closure")
        if function.__kwdefaults__:
            raise UntrustedValue(f"{label}: test function {function.__name__} has keyword-only defaults")
        for default in (function.__defaults__ or ()):
            self.checker.check(default, f"{label}: a default of {function.__name__}")
        safe_globals: dict[str, Any] = {"__builtins__": builtins}
        rebuilt = types.FunctionType(function.__code__, safe_globals, function.__name__, function.__defaults__, None)
        done[id(function)] = rebuilt
        for name in _referenced_names(function.__code__):
            if name not in namespace:
                continue
            safe_globals[name] = self.safe_value(namespace[name], namespace, f"{label}: {name}", done)
        return rebuilt

    def safe_value(self, value: Any, namespace: dict[str, Any], label: str, done: dict[int, Any]) -> Any:
        if id(value) in self.snapshot.trusted_module_ids or id(value) in self.snapshot.trusted_callables:
            return value
        if self.is_test_function(value):
            return self.rebuild(value, namespace, label, done)
        self.checker.check(value, label)
        return value


def run_harness(fd: int, spec: dict[str, Any]) -> int:
    harness = Harness(fd, spec)
    try:
        passed = _run_step(harness, spec)
    except StepFailed as failure:
        harness.send({"type": failure.kind, "reason": failure.reason, "test": failure.test})
        harness.write_stderr(f"[harness] {failure.kind}: {failure.reason}")
        return 1
    except Exception as error:  # noqa: BLE001 - a defect of the harness itself is an evaluation error
        harness.send({"type": "harness_error", "reason": f"harness error: {_short_exception(error)}", "test": None})
        harness.write_stderr("".join(traceback.format_exception(type(error), error, error.__traceback__)))
        return 3
    harness.send({"type": "complete", "passed": passed})
    return 0


def _run_step(harness: Harness, spec: dict[str, Any]) -> int:
    step_id = spec["step_id"]
    missing = preload(tuple(spec.get("modules", ())))
    del missing
    module = types.ModuleType("__main__")
    namespace = module.__dict__
    namespace["__builtins__"] = builtins
    sys.modules["__main__"] = module
    sys.argv = [f"{step_id}.py"]

    try:
        exec(_compile(spec["deps"], "dependencies"), namespace)
    except BaseException as error:  # noqa: BLE001
        raise StepFailed("deps_error", f"required dependencies failed: {_short_exception(error)}") from None

    sections = []
    for section in spec["sections"]:
        try:
            sections.append((section["label"], _compile(section["code"], section["label"])))
        except SyntaxError as error:
            raise StepFailed("code_error", f"syntax error in {section['label']}: {error.msg} (line {error.lineno})") from None
    tests = []
    test_codes: set[int] = set()
    for test in spec["tests"]:
        label = f"test {test['index'] + 1}"
        try:
            prefetch = _compile(test["prefetch"], label)
            residual = _compile(test["residual"], f"{label} comparison") if test["residual"] is not None else None
        except SyntaxError as error:
            raise StepFailed("harness_error", f"{label} does not compile: {error.msg}") from None
        test_codes |= _code_objects(prefetch)
        tests.append((test, prefetch, residual))

    install_hdf5_tripwire()
    sandbox = forbid_reading(spec.get("targets_file"))
    if sandbox != "landlock" and spec.get("targets_file"):
        harness.write_stderr(f"[harness] kernel-level read protection of the targets file {sandbox}")
    snapshot = Snapshot(namespace, set())
    checker = ValueChecker(snapshot)
    rebuilder = TestFunctionRebuilder(checker, snapshot, test_codes)
    trampoline = _make_trampoline()
    policy = AuditPolicy(spec.get("targets_file"), os.getcwd(), library_directories())
    sys.addaudithook(policy.hook)
    baseline_threads = _thread._count()
    policy.sealed = True

    def verify(after: str, exempt: set[str]) -> None:
        if not wait_for_threads(baseline_threads):
            raise StepFailed("violation", f"code under test left threads running after {after}")
        if policy.violations:
            raise StepFailed("violation", f"blocked {policy.violations[0]} during {after}")
        replaced = snapshot.replaced_library_name()
        if replaced:
            raise StepFailed("violation", f"replaced {replaced} (during {after})")
        shadowed = snapshot.replaced_namespace_name(namespace, exempt)
        if shadowed:
            raise StepFailed("violation", f"replaced `{shadowed}` in the test namespace (during {after})")

    for label, code in sections:
        outcome = run_in_worker(trampoline, code, namespace)
        verify(label, set())
        _raise_for_outcome(harness, outcome, f"{label}", None)

    passed = 0
    for test, prefetch, residual in tests:
        index = test["index"]
        label = f"test {index + 1}"
        exempt = set(test["assigned_names"]) | _star_names(test.get("star_modules", ()))
        outcome = run_in_worker(trampoline, prefetch, namespace)
        verify(label, exempt)
        _raise_for_outcome(harness, outcome, label, index)
        snapshot.accept_names(namespace, exempt)
        if residual is not None:
            temps = {name: namespace.pop(name, _MISSING) for name in test["temps"]}
            comparison_namespace = _checked_temporaries(temps, set(test["callee_temps"]), namespace, snapshot,
                                                        checker, rebuilder, label, index)
            comparison_namespace["target"] = harness.fetch_target(index)
            try:
                exec(residual, comparison_namespace)
            except AssertionError as error:
                message = _short_exception(error)
                harness.write_stderr(f"{label} failed: {message}")
                raise StepFailed("test_failed", f"{label} failed: {message}", index) from None
            except Exception as error:  # noqa: BLE001 - library code raising on the compared values
                message = _short_exception(error)
                harness.write_stderr(f"{label} raised while comparing: {message}")
                raise StepFailed("test_failed", f"{label} raised while comparing: {message}", index) from None
            finally:
                comparison_namespace.clear()
        passed += 1
        harness.send({"type": "test_passed", "test": index})
    return passed


def _raise_for_outcome(harness: Harness, outcome: dict[str, str], label: str, index: int | None) -> None:
    kind = outcome.get("outcome")
    if kind == "ok":
        return
    harness.write_stderr(outcome.get("text", ""))
    summary = outcome.get("summary", "unknown error")
    if kind == "exit":
        raise StepFailed("violation", f"code under test raised {summary} during {label} (exiting early is not a pass)", index)
    if kind == "error":
        kind_name = "code_error" if index is None else "test_failed"
        raise StepFailed(kind_name, f"{label} raised {summary}", index)
    raise StepFailed("violation", f"{label} did not report how it ended", index)


def _star_names(modules: Any) -> set[str]:
    names: set[str] = set()
    for name in modules:
        module = sys.modules.get(name)
        if module is not None:
            exported = getattr(module, "__all__", None)
            names |= set(exported) if isinstance(exported, (list, tuple)) else {n for n in vars(module) if not n.startswith("_")}
    return names


def _checked_temporaries(temps: dict[str, Any], callees: set[str], namespace: dict[str, Any], snapshot: Snapshot,
                         checker: ValueChecker, rebuilder: TestFunctionRebuilder, label: str, index: int) -> dict[str, Any]:
    checked: dict[str, Any] = {"__builtins__": dict(snapshot.builtins_dict)}
    for name, value in temps.items():
        if value is _MISSING:
            raise StepFailed("violation", f"{label}: a value computed before the comparison disappeared", index)
        try:
            checked[name] = _checked_value(value, name in callees, namespace, snapshot, checker, rebuilder, label)
        except UntrustedValue as problem:
            raise StepFailed("violation", f"{label}: {problem}", index) from None
    return checked


def _checked_value(value: Any, callee: bool, namespace: dict[str, Any], snapshot: Snapshot, checker: ValueChecker,
                   rebuilder: TestFunctionRebuilder, label: str) -> Any:
    if id(value) in snapshot.trusted_callables or id(value) in snapshot.trusted_module_ids:
        return value
    if rebuilder.is_test_function(value):
        return rebuilder.rebuild(value, namespace, label)
    if callee:
        name = getattr(value, "__qualname__", type(value).__name__)
        raise UntrustedValue(f"the function compared with the target ({name}) is not a library function present when the harness started")
    checker.check(value, "a value compared with the target")
    return value


def main_from_zygote(channel_fd: int) -> int:
    """Entry of a forked child: the spec arrives on the channel; returns the exit code."""
    import tempfile

    tempfile.tempdir = None  # the zygote may have cached another temp folder
    return _serve(channel_fd)


def _serve(channel_fd: int) -> int:
    streams = (sys.stdout, sys.stderr)
    try:
        spec = json.loads(read_frame(channel_fd).decode("utf-8"))
    except Exception as error:  # noqa: BLE001
        sys.stderr.write(f"[harness] no job received: {error}\n")
        return 2
    if spec.get("protocol") != PROTOCOL_VERSION:
        sys.stderr.write("[harness] protocol mismatch\n")
        return 2
    code = run_harness(channel_fd, spec)
    for stream in streams:
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    return code


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="SciCode test harness (run by the scoring engine)")
    parser.add_argument("--channel-fd", type=int, required=True)
    parser.add_argument("--memory-mb", type=int, default=0)
    options = parser.parse_args(argv)
    apply_memory_limit(options.memory_mb or None)
    os._exit(_serve(options.channel_fd))


if __name__ == "__main__":
    main()
