"""Snippets and test processes run in the pipeline's own environment: a venv's `python`, as invoked.

The venv is built here over this interpreter (`--system-site-packages`, no pip, no network) and holds one tiny
package that its base does not have. A snippet started with that venv's `python` imports it, a test process does,
the environment probe of the preflight finds it there and names it where it is missing.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from stages.config import ConfigError, load_settings
from stages.generate.tools import CODE_INTERPRETER, run_tool
from stages.preflight import check_environment, required_modules
from stages.problems import Problem
from stages.score import launcher
from tests.score.score_helpers import problem, run_code

PACKAGE = "scicode_venv_only_package"
PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`<venv>/bin/python` (a link to this interpreter) whose site-packages alone hold PACKAGE."""
    root = tmp_path_factory.mktemp("venv") / "env"
    venv.EnvBuilder(system_site_packages=True, with_pip=False, symlinks=True).create(root)
    python = root / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    package = Path(purelib) / PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("VALUE = 42\n")
    yield python
    launcher.stop_zygotes()  # its zygote must not outlive the venv


def imports(python: Path | str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-c", f"import {PACKAGE}"], capture_output=True, text=True)


def settings_with(tmp_path: Path, python: Path | str):
    return load_settings(
        {"code_workdir": str(tmp_path / "interpreter"), "model": "m", "python_binary": str(python)}, cwd=tmp_path
    )


def test_only_the_venv_has_the_package(venv_python: Path) -> None:
    assert venv_python.is_symlink() and venv_python.resolve() != venv_python
    assert imports(venv_python).returncode == 0
    assert "No module named" in imports(sys.executable).stderr
    assert "No module named" in imports(venv_python.resolve()).stderr  # the venv's base interpreter, by its realpath


def test_the_default_python_binary_is_the_interpreter_as_invoked(venv_python: Path) -> None:
    code = "from stages.config import Settings; print(Settings().python_binary)"
    shown = subprocess.run([str(venv_python), "-c", code], capture_output=True, text=True, cwd=PROJECT, check=True)
    assert shown.stdout.strip() == str(venv_python)


def test_a_snippet_imports_what_only_the_venv_has(venv_python: Path, tmp_path: Path) -> None:
    code = f"import sys, {PACKAGE}\nprint({PACKAGE}.VALUE, sys.prefix)"
    outcome = run_tool(CODE_INTERPRETER, json.dumps({"code": code}), settings_with(tmp_path, venv_python))
    assert outcome.status == "ok", outcome.output
    assert outcome.output == f"42 {venv_python.parent.parent}\n"


def test_a_test_process_imports_what_only_the_venv_has(venv_python: Path, shared_scicode: Path) -> None:
    code = f"import {PACKAGE}\nassert {PACKAGE}.VALUE == 42\n"
    code += "def tensor(*args):\n    M = 1\n    for a in args:\n        M = np.kron(M, a)\n    return M\n"
    verdict = run_code(shared_scicode, "19", "19.1", code, python_binary=str(venv_python))
    assert verdict.status == "pass", verdict.reason


def problem_needing(shared_scicode: Path, *modules: str) -> Problem:
    deps = "".join(f"import {module}\n" for module in modules)
    return dataclasses.replace(problem(shared_scicode, "19"), required_dependencies=deps)


def test_the_environment_probe_finds_the_venv_package(venv_python: Path, tmp_path: Path, shared_scicode) -> None:
    problems = (problem_needing(shared_scicode, "numpy", "scipy.linalg", PACKAGE),)
    assert required_modules(problems) == ("numpy", PACKAGE, "scipy.linalg")
    line = check_environment(settings_with(tmp_path, venv_python), problems)
    assert line.startswith(f"environment ok: {venv_python} imports the 3 modules") and "seccomp filter on" in line


def test_the_environment_probe_names_what_is_missing(tmp_path: Path, shared_scicode: Path) -> None:
    problems = (problem_needing(shared_scicode, "numpy", PACKAGE, f"{PACKAGE}.sub"),)
    with pytest.raises(ConfigError) as raised:
        check_environment(settings_with(tmp_path, sys.executable), problems)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"python_binary={sys.executable} cannot import {PACKAGE} under the snippet confinement")
    assert f"No module named '{PACKAGE}'" in message and "numpy" not in message.split("(")[0]
