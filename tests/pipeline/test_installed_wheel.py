"""The package installed like any other: a wheel built from the checkout, installed (not editable) into a fresh venv,
runs a validation run through a `dodo.py` copied alone into an empty folder.

The venv sees the system's site-packages (so numpy, scipy, doit... are not downloaded again) and gets the wheel with
`--no-deps --ignore-installed`; the test then proves that `stages` is imported from the venv, never from the checkout
or from an editable install of it. Building the wheel fetches the build backend from the package index."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stages.storage.artifacts import validate
from tests.support.pipeline_support import data_args

pytestmark = [pytest.mark.slow, pytest.mark.network]

CHECKOUT = Path(__file__).resolve().parents[2]
# What a build of the checkout never reads: version control, caches, build output and a user's runs and data.
NOT_BUILT = shutil.ignore_patterns(
    ".git", "__pycache__", "*.egg-info", "build", "dist", ".pytest_cache", ".mypy_cache", ".ruff_cache"
)
LOCAL_FOLDERS = ("data", "results", ".scicode")  # the checkout's own runs, if any (top level only)
PROBLEM = "1"  # one validation step: the cheapest complete run
BUILD_SECONDS = 600
RUN_SECONDS = 600


def checked(command: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}"
    return done


def outside_the_checkout() -> dict[str, str]:
    """This environment without a PYTHONPATH (which names the checkout in the suite) and without any key."""
    return {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "OPENAI_API_KEY")}


def source_copy(destination: Path) -> Path:
    """A copy of the checkout's source tree (an in-tree build writes build/ and *.egg-info beside its sources)."""

    def ignored(folder: str, names: list[str]) -> set[str]:
        top = {name for name in names if name in LOCAL_FOLDERS} if Path(folder) == CHECKOUT else set()
        return set(NOT_BUILT(folder, names)) | top

    shutil.copytree(CHECKOUT, destination, symlinks=True, ignore=ignored)
    return destination


def built_wheel(tmp_path: Path, env: dict[str, str]) -> Path:
    source = source_copy(tmp_path / "source")
    dist = tmp_path / "dist"
    checked(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q", "-w", str(dist), "."],
        source,
        env,
        BUILD_SECONDS,
    )
    (wheel,) = dist.glob("scicode_pipeline-*.whl")
    return wheel


def venv_with(wheel: Path, venv: Path, env: dict[str, str]) -> Path:
    """A fresh venv over the system's site-packages holding `wheel` installed (not editable); its python."""
    checked([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], venv.parent, env, BUILD_SECONDS)
    python = venv / "bin" / "python"
    install = ["-m", "pip", "install", "--no-deps", "--ignore-installed", "--disable-pip-version-check", "-q"]
    checked([str(python), *install, str(wheel)], venv.parent, env, BUILD_SECONDS)
    return python


def git_repository(folder: Path, env: dict[str, str]) -> Path:
    """`folder` as a git repository with one commit: a user's project that keeps its venv inside."""
    folder.mkdir()
    identity = ["-c", "user.name=someone", "-c", "user.email=someone@example.invalid"]
    checked(["git", "init", "-q"], folder, env, 60)
    checked(["git", *identity, "commit", "-q", "--allow-empty", "-m", "a user's project"], folder, env, 60)
    return folder


IMPORT_PROBE = "import json, stages, sys; print(json.dumps({'stages': stages.__file__, 'path': sys.path}))"


def test_a_wheel_installed_into_a_fresh_venv_runs_a_dodo_copied_alone(
    tmp_path: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    env = outside_the_checkout()
    wheel = built_wheel(tmp_path, env)
    project = git_repository(tmp_path / "project", env)
    venv = project / ".venv"
    python = venv_with(wheel, venv, env)

    workdir = tmp_path / "empty"
    workdir.mkdir()
    shutil.copyfile(CHECKOUT / "dodo.py", workdir / "dodo.py")
    assert [path.name for path in workdir.iterdir()] == ["dodo.py"]

    probe = json.loads(checked([str(python), "-c", IMPORT_PROBE], workdir, env, 60).stdout)
    assert Path(probe["stages"]).resolve().is_relative_to(venv.resolve()), probe["stages"]
    searched = [(workdir / entry).resolve() for entry in probe["path"]]  # "" (and any relative entry): workdir
    assert not [entry for entry in searched if entry == CHECKOUT or entry.is_relative_to(CHECKOUT)], searched

    run = [str(python), "-m", "doit", "run", "model=gold", "split=validation", f"sample_ids={PROBLEM}"]
    done = checked([*run, *data_args(staged_data_dir, dev_targets)], workdir, env, RUN_SECONDS)  # no download
    summary_path = workdir / "results" / "scicode" / "gold" / "validation-tool_use-bg" / f"summary-ids-{PROBLEM}.json"
    assert summary_path.is_file(), done.stdout + done.stderr
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    validate("summary", summary)
    assert summary["subproblem_correct"] == summary["subproblem_total"] > 0, summary["status_counts"]
    # The version is the installed distribution's; the commit is none, though the venv lies inside a git
    # repository: that repository is a user's project, not this package's source.
    assert summary["project"] == {"name": "scicode-pipeline", "version": "0.1.0", "commit": None, "dirty": None}
