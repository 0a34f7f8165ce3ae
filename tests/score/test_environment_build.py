"""`doit environments`: the protocol's grading environments built as venvs from the package index, reused once
built, refused in one line when a pin cannot be installed (stages.score.parent.environments)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from stages.benchmark.environments import EnvironmentPins, protocol_environments
from stages.config.environments import parse_environments
from stages.score.parent.environments import (
    RECORD_NAME,
    EnvironmentBuildError,
    build_environment,
    environment_folder,
    installed_versions,
    is_built,
)
from tests.conftest import environments_workdir
from tests.support.pipeline_support import run_doit

PROTOCOL = {pins.name: pins for pins in protocol_environments()}


def test_the_protocol_environments_are_the_published_pins() -> None:
    assert list(PROTOCOL) == ["2024-era", "2025-era"]  # the order the protocol tries them
    assert dict(PROTOCOL["2024-era"].packages) == {
        "numpy": "1.26.4",
        "scipy": "1.13.1",
        "sympy": "1.13.3",
        "h5py": "3.12.1",
    }
    assert PROTOCOL["2025-era"].requirements == (
        "numpy==2.4.2",
        "scipy==1.17.1",
        "sympy==1.14.0",
        "h5py==3.15.1",
        "matplotlib==3.10.9",
    )


def test_a_folder_is_keyed_by_its_pins_and_counts_as_built_only_with_its_record_and_versions(tmp_path: Path) -> None:
    pins = PROTOCOL["2024-era"]
    folder = environment_folder(tmp_path, pins)
    assert folder.name.startswith("2024-era-")
    changed = EnvironmentPins("2024-era", (("numpy", "1.26.3"), *pins.packages[1:]))
    assert environment_folder(tmp_path, changed) != folder
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "python").symlink_to(sys.executable)  # this interpreter: numpy 2, not the pins
    assert not is_built(folder, pins)  # no record
    (folder / RECORD_NAME).write_text("{}")
    assert not is_built(folder, pins)  # a record, but other versions
    mine = installed_versions(folder / "bin" / "python", ("numpy",))["numpy"]
    assert mine is not None and is_built(folder, EnvironmentPins("mine", (("numpy", mine),)))


@pytest.mark.network
def test_a_pin_without_a_wheel_is_one_line_naming_the_environment(tmp_path: Path) -> None:
    pins = EnvironmentPins("broken", (("numpy", "0.0.1"),))
    with pytest.raises(EnvironmentBuildError) as caught:
        build_environment(tmp_path, pins, say=lambda line: None)
    message = str(caught.value)
    assert message.startswith("environment broken: installing numpy==0.0.1 failed: ") and "\n" not in message
    assert not is_built(environment_folder(tmp_path, pins), pins)


@pytest.mark.slow
@pytest.mark.network
def test_doit_environments_builds_both_once_and_prints_the_setting(tmp_path: Path, era2024_python: Path) -> None:
    """Run in a folder whose .scicode/environments is the suite's kept one (so each venv is built once per
    machine): the first run builds what is missing, the second finds both built and prints the same value."""
    (tmp_path / ".scicode").mkdir()
    os.symlink(environments_workdir(), tmp_path / ".scicode" / "environments")
    first = run_doit(tmp_path, "environments", timeout=1800)
    assert first.returncode == 0, first.stdout + first.stderr
    started = time.monotonic()
    again = run_doit(tmp_path, "environments", timeout=600)
    assert again.returncode == 0 and time.monotonic() - started < 120
    assert "environment 2024-era: up to date" in again.stdout and "environment 2025-era: up to date" in again.stdout
    value = next(line for line in again.stdout.splitlines() if line.startswith("grade in these environments with: "))
    setting = value.split("with: environments=", 1)[1]
    named = parse_environments(setting)
    assert [environment.name for environment in named] == ["2024-era", "2025-era"]
    assert named[0].python == str(era2024_python.parent.parent.resolve() / "bin" / "python")
    assert installed_versions(Path(named[1].python), ("numpy", "matplotlib")) == {
        "numpy": "2.4.2",
        "matplotlib": "3.10.9",
    }
