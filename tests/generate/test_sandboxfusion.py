"""code_interpreter against a real SandboxFusion server (../shared/sandboxfusion), compared with the local back end.

The server is started once per session by the `sandboxfusion_url` fixture (tests/conftest.py) and runs
snippets with this interpreter, so local and sandbox results can be compared one to one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stages.config.settings import load_settings
from stages.generate.tools import CODE_INTERPRETER, OUTPUT_LIMIT, ToolOutcome, run_tool

pytestmark = pytest.mark.slow

IMPORT_PROBE = "import numpy, scipy.linalg, sympy\nprint(numpy.linalg.eigvalsh(numpy.eye(3)).sum(), sympy.sqrt(4))\n"


@pytest.fixture
def backends(tmp_path: Path, sandboxfusion_url: str):
    """make(**values) -> (local settings, sandbox settings), the same but for `sandbox_url`."""

    def make(**values: str):
        data_dir = tmp_path / "data"
        (data_dir / "scicode").mkdir(parents=True, exist_ok=True)
        base = {
            "data_dir": str(data_dir),
            "code_workdir": str(tmp_path / "interpreter"),
            "model": "m",
            "split": "all",
            "sandbox_retry_delay_seconds": "0.1",
            **values,
        }
        return (
            load_settings(base, cwd=tmp_path),
            load_settings({**base, "sandbox_url": sandboxfusion_url}, cwd=tmp_path),
        )

    return make


def both(code: str, local, sandbox) -> tuple[ToolOutcome, ToolOutcome]:
    arguments = json.dumps({"code": code})
    return run_tool(CODE_INTERPRETER, arguments, local), run_tool(CODE_INTERPRETER, arguments, sandbox)


@pytest.mark.parametrize("memory_limit_mb", ["1024", "0"])
def test_numpy_scipy_sympy_import_in_the_sandbox_with_the_defaults(backends, memory_limit_mb: str) -> None:
    local, sandbox = backends(sandbox_memory_limit_mb=memory_limit_mb)
    assert sandbox.sandbox_memory_limit_mb == int(memory_limit_mb)
    here, there = both(IMPORT_PROBE, local, sandbox)
    assert (there.status, there.output) == ("ok", "3.0 2\n"), there.output
    assert (here.status, here.output) == (there.status, there.output)


def test_a_timeout_comes_back_as_locally(backends) -> None:
    local, sandbox = backends(code_timeout_seconds="2")
    here, there = both("import time\nprint('started', flush=True)\ntime.sleep(30)\n", local, sandbox)
    assert here.status == there.status == "timeout"
    assert here.output == there.output
    assert there.output.startswith("started\n") and "timed out after 2 s" in there.output
    assert there.duration_s < 15


def test_a_huge_output_is_truncated_as_locally(backends) -> None:
    local, sandbox = backends()
    here, there = both("print('x' * 500_000)\nprint('THE END')\n", local, sandbox)
    assert here.status == there.status == "ok"
    assert here.truncated and there.truncated
    for outcome in (here, there):
        assert len(outcome.output) < OUTPUT_LIMIT + 300
        assert outcome.output.startswith("x" * 1000) and "output truncated" in outcome.output


def test_a_syntax_error_comes_back_as_locally(backends) -> None:
    local, sandbox = backends()
    here, there = both("def broken(:\n    pass\n", local, sandbox)
    assert here.status == there.status == "error"
    assert here.output == there.output, (here.output, there.output)
    assert 'File "snippet.py", line 1' in there.output and "SyntaxError" in there.output


def test_a_runtime_error_names_the_snippet_lines_as_locally(backends) -> None:
    local, sandbox = backends(execution_preamble="OFFSET = 1")
    here, there = both("x = OFFSET\nprint(x)\nraise ValueError('bad value')\n", local, sandbox)
    assert here.status == there.status == "error"
    assert here.output == there.output, (here.output, there.output)
    assert 'File "snippet.py", line 3' in there.output and "ValueError: bad value" in there.output


def test_a_dead_sandbox_url_is_a_sandbox_error(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    (data_dir / "scicode").mkdir(parents=True)
    settings = load_settings(
        {
            "data_dir": str(data_dir),
            "model": "m",
            "split": "all",
            "sandbox_url": "http://127.0.0.1:9",
            "sandbox_max_retries": "1",
            "sandbox_retry_delay_seconds": "0",
        },
        cwd=tmp_path,
    )
    outcome = run_tool(CODE_INTERPRETER, json.dumps({"code": "print(1)"}), settings)
    assert outcome.status == "sandbox_error" and "cannot reach" in outcome.output
