"""Snippets and test processes run in the pipeline's own environment: a venv's `python`, as invoked.

The venv is the one the suite runs in, else one built here over this interpreter (`--system-site-packages`, no pip, no network) and holds one tiny
package that its base does not have. A snippet started with that venv's `python` imports it, a test process does,
the environment probe of the preflight finds it there and names it where it is missing.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from stages.benchmark.problems import Problem
from stages.config.settings import ConfigError, load_settings
from stages.generate.tools import CODE_INTERPRETER, run_tool
from stages.preflight.checks import check_environment, required_modules
from stages.score.parent import launcher
from tests.score.score_helpers import problem, run_code
from tests.support.pipeline_support import (
    TEST_API_KEY,
    ScriptedModel,
    data_args,
    model_args,
    output_of,
    run_doit,
    steps_of,
)

PACKAGE = "scicode_venv_only_package"
PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture
def venv_python(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """`<venv>/bin/python` (a link to this interpreter) whose site-packages alone hold PACKAGE. When the suite
    itself runs in a venv (as the README installs it, over a Python that may lack numpy), that venv is the one:
    a venv built from it would see only the bare base's packages."""
    if sys.prefix != sys.base_prefix:
        python = Path(sys.prefix) / "bin" / "python"
    else:
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
    try:
        yield python
    finally:
        launcher.stop_zygotes()  # its zygote must not outlive the venv
        shutil.rmtree(package)


def imports(python: Path | str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-c", f"import {PACKAGE}"], capture_output=True, text=True)


def settings_with(tmp_path: Path, python: Path | str):
    return load_settings(
        {"code_workdir": str(tmp_path / "interpreter"), "model": "m", "python_binary": str(python)}, cwd=tmp_path
    )


def test_only_the_venv_has_the_package(venv_python: Path) -> None:
    assert venv_python.is_symlink() and venv_python.resolve() != venv_python
    assert imports(venv_python).returncode == 0
    assert "No module named" in imports(sys.executable).stderr or sys.prefix != sys.base_prefix
    assert "No module named" in imports(venv_python.resolve()).stderr  # the venv's base interpreter, by its realpath


def test_the_default_python_binary_is_the_interpreter_as_invoked(venv_python: Path) -> None:
    code = "from stages.config.settings import Settings; print(Settings().python_binary)"
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


@pytest.fixture(scope="module")
def bare_venv_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv without the base's site-packages: no numpy, as over a system Python that lacks it."""
    root = tmp_path_factory.mktemp("bare-venv") / "env"
    venv.EnvBuilder(system_site_packages=False, with_pip=False, symlinks=True).create(root)
    python = root / "bin" / "python"
    assert (
        "No module named 'numpy'"
        in subprocess.run([str(python), "-c", "import numpy"], capture_output=True, text=True).stderr
    )
    return python


def refusal_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [
        line for line in result.stderr.splitlines() if line.strip() and not line.startswith(("download ", "select "))
    ]
    assert result.returncode == 3 and len(lines) == 1, output_of(result)
    return lines[0]


@pytest.mark.slow
def test_a_run_whose_python_binary_lacks_a_dependency_stops_before_any_generation_or_scoring(
    tmp_path: Path, staged_data_dir: Path, dev_targets: Path, start_server, bare_venv_python: Path
) -> None:
    model = ScriptedModel(steps_of(staged_data_dir, ("1",)))
    args = (*data_args(staged_data_dir, dev_targets), *model_args(start_server(model)), "sample_ids=1", "mode=naive")
    refused = run_doit(tmp_path, *args, f"python_binary={bare_venv_python}", api_key=TEST_API_KEY)
    line = refusal_line(refused)
    assert f"python_binary={bare_venv_python} cannot import numpy under the snippet confinement" in line, line
    assert model.total() == 0
    # Generation alone (naive: nothing runs in python_binary) needs no probe; scoring it afterwards does.
    generated = run_doit(tmp_path, "generate", *args, f"python_binary={bare_venv_python}", api_key=TEST_API_KEY)
    assert generated.returncode == 0 and "environment ok" not in generated.stdout, output_of(generated)
    rescored = run_doit(tmp_path, "score", *args, f"python_binary={bare_venv_python}", api_key=TEST_API_KEY)
    assert "cannot import numpy" in refusal_line(rescored)
    scored = run_doit(tmp_path, "score", *args, api_key=TEST_API_KEY)
    assert scored.returncode == 0 and "preflight: environment ok:" in scored.stdout, output_of(scored)
