"""What the test process, the checker and the zygote share: framing, preloading, versions, confinement.

Standalone (standard library plus the numeric packages): it runs under `settings.python_binary`, with the
folders of the programs that run there (`CHILD_FOLDERS`: this one, `runtime/`, `../test_process/`,
`../checker/`) on `sys.path`, their modules imported by their plain names; it never imports the `stages`
package.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType

HEADER_BYTES = 8
MAX_FRAME_BYTES = 1 << 34
HERE = os.path.dirname(os.path.abspath(__file__))
SCORE_DIR = os.path.dirname(HERE)
RUNTIME_DIR = os.path.join(HERE, "runtime")
TEST_PROCESS_DIR = os.path.join(SCORE_DIR, "test_process")
CHECKER_DIR = os.path.join(SCORE_DIR, "checker")
# What runs under `python_binary`: the shared modules, our `scicode` package and shims, the test process, the
# checker (their modules are imported by their plain names: `child_runtime`, `wire`, `runner`, `checker`).
CHILD_FOLDERS = (HERE, RUNTIME_DIR, TEST_PROCESS_DIR, CHECKER_DIR)
CONFINE_FILE = os.path.join(os.path.dirname(SCORE_DIR), "execution", "confinement", "confine.py")
PRELOADED = (
    "numpy",
    "numpy.linalg",
    "numpy.fft",
    "numpy.random",
    "scipy",
    "scipy.integrate",
    "scipy.optimize",
    "scipy.linalg",
    "scipy.sparse",
    "scipy.sparse.linalg",
    "scipy.special",
    "scipy.interpolate",
    "scipy.signal",
    "scipy.constants",
    "scipy.spatial",
    "scipy.spatial.distance",
    "scipy.fft",
    "scipy.stats",
    "sympy",
    "math",
    "cmath",
    "itertools",
    "functools",
    "copy",
    "random",
    "collections",
    "scicode.parse.parse",
    "scicode.compare.cmp",
    "wire",
)


# ---------------------------------------------------------------------------
# Framing: 8-byte big-endian length, then the payload
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
# Interpreter set-up
# ---------------------------------------------------------------------------


def add_child_folders() -> None:
    """Put `CHILD_FOLDERS` first on sys.path (once each)."""
    for folder in reversed(CHILD_FOLDERS):
        if folder not in sys.path:
            sys.path.insert(0, folder)


def preload(extra: tuple[str, ...] = ()) -> list[str]:
    """Put our folders on sys.path, install the compatibility shims and import the usual modules."""
    add_child_folders()
    import _scicode_compat

    _scicode_compat.install()
    missing = []
    for name in PRELOADED + tuple(extra):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module that cannot be imported fails later, in its cell
            missing.append(name)
    return missing


def running_interpreter_versions() -> dict[str, str]:
    """Interpreter and library versions (part of the verdict cache key)."""
    versions = {
        "python": sys.version.split()[0],
        "implementation": sys.implementation.name,
        "executable": sys.executable,
    }
    for name in ("numpy", "scipy", "sympy", "mpmath", "h5py"):
        module = sys.modules.get(name)
        if module is None:
            try:
                module = importlib.import_module(name)
            except Exception:  # noqa: BLE001
                versions[name] = "absent"
                continue
        versions[name] = str(getattr(module, "__version__", "unknown"))
    return versions


_CONFINE: ModuleType | None = None


def confine_module() -> ModuleType:
    """`stages/confinement/confine.py`, loaded by path (this folder is not the `stages` package here)."""
    global _CONFINE
    if _CONFINE is None:
        spec = importlib.util.spec_from_file_location("_scicode_confine", CONFINE_FILE)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        _CONFINE = module
    return _CONFINE


def sandbox_read_paths() -> list[str]:
    """What a confined test process or checker may read: the interpreter's files and the programs that run
    under `python_binary` (`CHILD_FOLDERS`)."""
    interpreter: list[str] = confine_module().interpreter_read_paths()
    return interpreter + list(CHILD_FOLDERS)


def short_exception(error: BaseException) -> str:
    try:
        text = str(error)
    except BaseException:  # noqa: BLE001
        text = ""
    if isinstance(error, SystemExit):
        return f"SystemExit({error.code!r})"
    name = type(error).__name__
    return f"{name}: {text[:300]}" if text else name
