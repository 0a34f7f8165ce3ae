"""Engine-side target reading: the test process never opens the targets file.

Targets are read with our `scicode.parse.parse.process_hdf5_to_tuple` (the same reader the test
cases would use) and pickled one per test, handed to the checker process. When
`python_binary` is another interpreter, the values are read and pickled by that interpreter (so the
pickles match its numpy), through `load_targets.py`.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import subprocess
import sys
import threading
from functools import lru_cache
from pathlib import Path
from types import ModuleType

from stages.execution.isolation import scrubbed_environment
from stages.score.shared import child_runtime

PICKLE_PROTOCOL = 4
RUNTIME_DIR = Path(child_runtime.RUNTIME_DIR)
LOADER = Path(__file__).resolve().parent / "load_targets.py"
_LOCK = threading.Lock()


class TargetsUnavailable(Exception):
    """The targets of a step cannot be read (missing file or group); the step is an eval_error."""


@lru_cache(maxsize=1)
def _parse_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "_scicode_engine_parse", RUNTIME_DIR / "scicode" / "parse" / "parse.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def same_interpreter(python_binary: str) -> bool:
    try:
        return os.path.samefile(python_binary, sys.executable)
    except OSError:
        return False


def load_step_targets(path: Path | None, step_id: str, count: int, python_binary: str) -> list[bytes]:
    """One pickle per test of `step_id`; raises TargetsUnavailable naming what is missing."""
    if count == 0:
        return []
    if path is None:
        raise TargetsUnavailable("no targets file (official targets missing and none derived)")
    if not Path(path).is_file():
        raise TargetsUnavailable(f"targets file {path} not found")
    if same_interpreter(python_binary):
        return _load_here(Path(path), step_id, count)
    return _load_with(python_binary, Path(path), step_id, count)


def read_step_targets(path: Path, step_id: str, count: int) -> list[object]:
    """The target values of the `count` tests of `step_id`, read in this process; raises TargetsUnavailable."""
    try:
        with _LOCK:  # h5py serializes access anyway; keep one file handle at a time
            return list(_parse_module().process_hdf5_to_tuple(step_id, count, str(path)))
    except (KeyError, FileNotFoundError) as error:
        raise TargetsUnavailable(f"targets of step {step_id} missing from {path.name}: {error}") from None
    except OSError as error:
        raise TargetsUnavailable(f"targets file {path} unreadable: {error}") from None


def _load_here(path: Path, step_id: str, count: int) -> list[bytes]:
    return [pickle.dumps(value, protocol=PICKLE_PROTOCOL) for value in read_step_targets(path, step_id, count)]


def _load_with(python_binary: str, path: Path, step_id: str, count: int) -> list[bytes]:
    result = subprocess.run(
        [python_binary, str(LOADER), str(path), step_id, str(count)],
        capture_output=True,
        env=scrubbed_environment(),
        timeout=600,
        check=False,
    )
    if result.returncode != 0:
        message = result.stderr.decode("utf-8", "replace").strip().splitlines()
        raise TargetsUnavailable(
            f"targets of step {step_id} unreadable: {message[-1] if message else result.returncode}"
        )
    return list(pickle.loads(result.stdout))
