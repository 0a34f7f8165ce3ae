"""Building a published protocol's grading environments as venvs (`doit environments`).

Each environment of `stages.benchmark.environments` becomes a venv over the running interpreter (the test process
and its runtime run there as in any `python_binary`), with exactly its pinned packages installed from the package
index as wheels (`--only-binary`: a version without a wheel for this python is refused at once, never compiled).
A venv lives in `<root>/<name>-<key>/`, the key a digest of the pins and the base interpreter, so changed pins or
another interpreter get a new folder and a rebuild never mixes them. A venv counts as built only when its record
(`scicode-environment.json`, written last, atomically) is there and its interpreter reports the pinned versions;
otherwise it is built again from nothing. One build of a folder at a time (a lock beside it): concurrent builders
wait and reuse it.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from stages.benchmark.environments import EnvironmentPins, protocol_environments
from stages.config.environments import Environment, environments_text
from stages.errors import PipelineError
from stages.storage.artifacts import atomic_write_text, fingerprint

if TYPE_CHECKING:
    from stages.config.settings import Settings

RECORD_NAME = "scicode-environment.json"
BUILD_TIMEOUT_SECONDS = 1800.0  # downloading and unpacking a scientific stack's wheels on a slow link
PROBE_TIMEOUT_SECONDS = 120.0
VERSIONS_PROBE = """\
import json, sys
from importlib import metadata
found = {}
for name in sys.argv[1:]:
    try:
        found[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        found[name] = None
print(json.dumps(found))
"""
Say = Callable[[str], None]


class EnvironmentBuildError(PipelineError, RuntimeError):
    """An environment cannot be built or does not hold its pins; one line naming it and what failed."""


def environment_key(pins: EnvironmentPins, base_python: str) -> str:
    """What a built venv depends on: its pins and the interpreter it is built over (its version and path)."""
    return fingerprint(
        {"packages": [list(pair) for pair in pins.packages], "base": base_python, "version": sys.version}
    )[:12]


def environment_folder(root: Path, pins: EnvironmentPins, base_python: str = sys.executable) -> Path:
    return root / f"{pins.name}-{environment_key(pins, base_python)}"


def venv_python(folder: Path) -> Path:
    return folder / "bin" / "python"


def installed_versions(python: Path, packages: tuple[str, ...]) -> dict[str, str | None]:
    """The installed version of each distribution in `python`'s environment (None when absent); {} when the
    interpreter cannot run."""
    try:
        done = subprocess.run(
            [str(python), "-I", "-c", VERSIONS_PROBE, *packages],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_SECONDS,
        )
        found = json.loads(done.stdout) if done.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def holds_pins(python: Path, pins: EnvironmentPins) -> bool:
    return installed_versions(python, tuple(name for name, _ in pins.packages)) == dict(pins.packages)


def is_built(folder: Path, pins: EnvironmentPins) -> bool:
    """Whether `folder` is a finished build of `pins` (its record written, its interpreter holding the pins)."""
    record = folder / RECORD_NAME
    return record.is_file() and holds_pins(venv_python(folder), pins)


@contextmanager
def build_lock(folder: Path) -> Iterator[None]:
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.with_name(folder.name + ".lock"), "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _run_step(pins: EnvironmentPins, what: str, command: list[str]) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise EnvironmentBuildError(f"environment {pins.name}: {what} failed: {error}") from None
    if done.returncode != 0:
        lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR")] or lines or ["no output"]
        raise EnvironmentBuildError(f"environment {pins.name}: {what} failed: {errors[-1][:300]}")


def _build(folder: Path, pins: EnvironmentPins, base_python: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    _run_step(pins, "creating the venv", [base_python, "-m", "venv", "--without-pip", str(folder)])
    install = [sys.executable, "-m", "pip", "--python", str(venv_python(folder)), "install"]
    options = ["--quiet", "--disable-pip-version-check", "--no-input", "--only-binary=:all:"]
    _run_step(pins, f"installing {' '.join(pins.requirements)}", [*install, *options, *pins.requirements])
    found = installed_versions(venv_python(folder), tuple(name for name, _ in pins.packages))
    if found != dict(pins.packages):
        raise EnvironmentBuildError(
            f"environment {pins.name}: holds {found} after installing, expected {dict(pins.packages)}"
        )
    record = {"name": pins.name, "packages": dict(pins.packages), "base": base_python}
    atomic_write_text(folder / RECORD_NAME, json.dumps(record, indent=1) + "\n")


def build_environment(root: Path, pins: EnvironmentPins, base_python: str = sys.executable, say: Say = print) -> Path:
    """The python of `pins`' venv under `root`, built when not already (see the module docstring)."""
    folder = environment_folder(root, pins, base_python)
    with build_lock(folder):
        if is_built(folder, pins):
            say(f"environment {pins.name}: up to date in {folder}")
        else:
            say(f"environment {pins.name}: building {' '.join(pins.requirements)} in {folder}")
            _build(folder, pins, base_python)
    return venv_python(folder)


def build_protocol_environments(root: Path, say: Say = print) -> tuple[Environment, ...]:
    """Every protocol environment built under `root`, as `environments=` entries (absolute interpreter paths)."""
    return tuple(
        Environment(pins.name, str(build_environment(root.resolve(), pins, say=say)))
        for pins in protocol_environments()
    )


def environments_setting(environments: tuple[Environment, ...]) -> str:
    """The `environments=` word that grades in `environments`."""
    return f"environments={environments_text(environments)}"


def build_for_settings(settings: Settings) -> None:
    """`doit environments`: build every protocol environment under the state folder and print the
    `environments=` word that grades in them; EnvironmentBuildError (one line) when one cannot be built."""
    built = build_protocol_environments(settings.state_paths.environments)
    print(f"grade in these environments with: {environments_setting(built)}", flush=True)
