"""The environment preflight under `environments=`: each grading environment is probed under the snippet
confinement for the selected problems' required_dependencies; one lacking a module stops the run with one line
naming the environment and the module."""

from __future__ import annotations

import sys
import venv
from pathlib import Path

import pytest

from stages.benchmark.problems import load_split
from stages.config.settings import ConfigError, load_settings
from stages.preflight.checks import Interpreter, check_environment, interpreters_to_check
from stages.score.parent import launcher
from stages.storage.paths import DataPaths


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory):
    """A venv over this interpreter without its packages (no numpy, no scipy)."""
    root = tmp_path_factory.mktemp("bare") / "env"
    venv.EnvBuilder(system_site_packages=False, with_pip=False, symlinks=True).create(root)
    yield root / "bin" / "python"
    launcher.stop_zygotes()


def settings_of(tmp_path: Path, **values: str):
    return load_settings({"code_workdir": str(tmp_path / "interpreter"), "model": "m", **values}, cwd=tmp_path)


def test_each_environment_is_checked_where_scoring_runs_and_python_binary_where_snippets_run(tmp_path: Path) -> None:
    named = settings_of(tmp_path, environments="old:/o/python,new:/n/python", mode="naive")
    assert [i.label for i in interpreters_to_check(named, generation_only=False)] == [
        "environment old (/o/python)",
        "environment new (/n/python)",
    ]
    assert interpreters_to_check(named, generation_only=True) == []  # naive generation runs nothing locally
    tools = settings_of(tmp_path, environments="old:/o/python", mode="tool_use")
    assert [i.python for i in interpreters_to_check(tools, generation_only=False)] == [tools.python_binary, "/o/python"]
    assert [i.python for i in interpreters_to_check(tools, generation_only=True)] == [tools.python_binary]
    plain = settings_of(tmp_path, mode="naive")
    assert [i.python for i in interpreters_to_check(plain, generation_only=False)] == [plain.python_binary]


def test_an_environment_missing_a_module_is_one_line_naming_it(
    tmp_path: Path, bare_python: Path, shared_scicode: Path
) -> None:
    settings = settings_of(tmp_path, environments=f"bare:{bare_python},current:{sys.executable}", mode="naive")
    problems = tuple(load_split(DataPaths(shared_scicode.parent), "validation"))
    bare, current = interpreters_to_check(settings, generation_only=False)
    with pytest.raises(ConfigError) as caught:
        check_environment(settings, problems, bare)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"environment bare ({bare_python}) cannot import numpy, scipy")
    assert "name an interpreter that has them in environments=" in message
    line = check_environment(settings, problems, current)
    assert line.startswith(f"environment ok: environment current ({sys.executable}) imports the ")
    assert isinstance(current, Interpreter)


def test_doit_with_an_environment_that_cannot_run_stops_with_one_line(
    tmp_path: Path, staged_data_dir: Path, shared_scicode: Path
) -> None:
    from stages.exit_codes import CONFIG_ERROR
    from tests.support.pipeline_support import data_args, run_doit

    missing = tmp_path / "no-such-env" / "bin" / "python"
    args = (*data_args(staged_data_dir, shared_scicode / "test_data_dev.h5"), "sample_ids=29", "mode=naive")
    first = run_doit(tmp_path, *args, f"environments=here:{sys.executable}", timeout=600)  # details exist now
    assert first.returncode == 0, first.stdout + first.stderr
    result = run_doit(tmp_path, *args, f"environments=here:{sys.executable},gone:{missing}", timeout=300)
    assert result.returncode == CONFIG_ERROR.code, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("scicode: config error:")]
    assert line.startswith(f"scicode: config error: environment gone ({missing}) cannot run a snippet")
    assert "(no model was called)" in line
    assert "gone" not in "".join(path.read_text() for path in (tmp_path / "results").rglob("details/*.json"))
