"""The doit side reads doit through one adapter, pinned to the doit release it relies on, and parses the command
line once."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from stages.config.command_line import CommandLine, invoked
from stages.pipeline.doit_adapter import DOIT_VERSION

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DOIT_SIDE = [PROJECT_ROOT / "dodo.py", *sorted((PROJECT_ROOT / "stages" / "pipeline").glob("*.py"))]
DOIT_SIDE += sorted((PROJECT_ROOT / "stages").glob("*/task.py"))


def test_the_installed_doit_is_the_release_the_adapter_relies_on() -> None:
    assert version("doit") == DOIT_VERSION


def test_pyproject_pins_that_doit_release() -> None:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert f"doit=={DOIT_VERSION}" in project["dependencies"]


def test_the_adapter_reads_the_variables_of_a_real_doit_command_line(tmp_path: Path) -> None:
    (tmp_path / "dodo.py").write_text(
        "from stages.pipeline.doit_adapter import command_line_variables\n"
        "def task_show():\n"
        "    return {'actions': [lambda: print(sorted(command_line_variables().items()))], 'verbosity': 2}\n",
        encoding="utf-8",
    )
    shown = subprocess.run(
        [sys.executable, "-m", "doit", "-f", "dodo.py", "--db-file", ".db", "show", "model=m1", "attempts=3"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(PROJECT_ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert "[('attempts', '3'), ('model', 'm1')]" in shown.stdout


def test_no_module_of_the_doit_side_reads_sys_argv_itself() -> None:
    readers = [path.name for path in DOIT_SIDE if "sys.argv" in path.read_text(encoding="utf-8")]
    assert readers == []


def test_the_command_line_is_parsed_once_per_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["/venv/lib/python3/site-packages/doit/__main__.py", "clean", "generate:7"])
    first = invoked()
    assert invoked() is first
    assert first.shown() == "doit clean generate:7"
    assert first.names_generate and not first.names_score and not first.executes_tasks
    monkeypatch.setattr(sys, "argv", ["doit", "score:7", "model=m"])
    assert invoked().rescore_only and invoked().requested_tasks == ["score:7"]


def test_what_a_command_line_implies() -> None:
    assert CommandLine.parse([]).runs_summary
    assert CommandLine.parse(["generate:3", "model=m"]).generation_only
    assert not CommandLine.parse(["generate:3", "score:3"]).generation_only
    assert not CommandLine.parse(["runs"]).runs_tasks
    assert CommandLine.parse(["score"]).runs_tasks and not CommandLine.parse(["score"]).runs_summary
    assert not CommandLine.parse(["list"]).runs_tasks


def test_listing_the_task_kinds_imports_no_stage_module() -> None:
    """Every doit command imports the registry; the stages behind the task kinds are imported when a task runs
    or a check needs them (the targets package's names included)."""
    program = (
        "import sys, stages.pipeline.tasks\n"
        "print(sorted(m for m in sys.modules if m.startswith('stages.') and m.rsplit('.', 1)[-1] in "
        "('stage', 'derive', 'resolve', 'checks', 'engine')))\n"
    )
    listed = subprocess.run(
        [sys.executable, "-c", program], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
    )
    assert listed.stdout.strip() == "[]"
