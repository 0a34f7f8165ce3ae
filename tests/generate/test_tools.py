"""The code_interpreter tool: schemas, confined local execution in real subprocesses, SandboxFusion client."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given

from stages.config.settings import load_settings
from stages.generate import tools
from stages.generate.tools import CODE_INTERPRETER, OUTPUT_LIMIT, run_tool, tool_schemas
from tests.support.fake_sandbox import FakeSandbox, run_result
from tests.support.hostile import hostile_text
from tests.support.process_scan import assert_no_process_with, unique_sleep_seconds
from tests.support.run_artifacts import json_at, json_str


def call(code: str, settings):
    return run_tool(CODE_INTERPRETER, json.dumps({"code": code}), settings)


@pytest.fixture
def settings_for(tmp_path: Path):
    def make(**values: str):
        data_dir = tmp_path / "data"
        (data_dir / "scicode").mkdir(parents=True, exist_ok=True)
        base = {"data_dir": str(data_dir), "code_workdir": str(tmp_path / "interpreter"), "model": "m", "split": "all"}
        return load_settings({**base, **values}, cwd=tmp_path)

    return make


def leftover_snippet_dirs(settings) -> list[str]:
    workdir = Path(settings.code_workdir)
    return sorted(p.name for p in workdir.iterdir() if p.name.startswith("snippet-")) if workdir.exists() else []


# ---------------------------------------------------------------------------
# Schemas and arguments
# ---------------------------------------------------------------------------


def test_tool_schemas_for_both_protocols() -> None:
    [chat] = tool_schemas(("code_interpreter",), "openai-chat")
    assert chat["type"] == "function"
    assert json_at(chat, "function", "name") == "code_interpreter"
    assert json_at(chat, "function", "parameters", "required") == ["code"]
    assert json_at(chat, "function", "parameters", "properties", "code", "type") == "string"
    [responses] = tool_schemas(["code_interpreter"], "openai-responses")
    assert responses["type"] == "function" and responses["name"] == "code_interpreter"
    assert responses["parameters"] == json_at(chat, "function", "parameters")
    assert str(OUTPUT_LIMIT) in json_str(responses["description"])
    with pytest.raises(ValueError, match="unknown tool 'shell'"):
        tool_schemas(("shell",), "openai-chat")


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("code_interpreter", "print(1)", "not valid JSON"),
        ("code_interpreter", "", 'string field "code"'),
        ("code_interpreter", '{"cmd": "ls"}', 'string field "code"'),
        ("code_interpreter", '{"code": 5}', 'string field "code"'),
        ("web_search", '{"code": "1"}', "unknown tool 'web_search'"),
    ],
)
def test_bad_calls_are_errors_the_model_can_read(settings_for, name: str, arguments: str, expected: str) -> None:
    outcome = run_tool(name, arguments, settings_for())
    assert outcome.status == "error"
    assert expected in outcome.output
    assert outcome.output.startswith("[code_interpreter:")


def test_a_lone_surrogate_in_the_code_argument_runs_as_the_replacement_character(settings_for) -> None:
    # issue 20: a lone surrogate in a tool call's arguments failed the snippet file's UTF-8 write
    outcome = run_tool(CODE_INTERPRETER, '{"code": "print(\'a\\ud800b\')"}', settings_for())
    assert (outcome.status, outcome.output) == ("ok", "a\ufffdb\n")


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"code": ' + "[" * 100_000 + "}", "nested too deeply"),
        (json.dumps({"code": "x" * tools.MAX_ARGUMENT_CHARS}), "characters, more than"),
    ],
)
def test_arguments_too_deep_or_too_long_are_errors_the_model_can_read(settings_for, arguments, expected) -> None:
    outcome = run_tool(CODE_INTERPRETER, arguments, settings_for())
    assert outcome.status == "error" and expected in outcome.output


@given(hostile_text())
def test_parsing_the_arguments_is_total(arguments: str) -> None:
    try:
        code = tools.parse_code_argument(arguments)
    except ValueError as error:
        str(error).encode("utf-8")
    else:
        code.encode("utf-8")


# ---------------------------------------------------------------------------
# Local execution
# ---------------------------------------------------------------------------


def test_local_snippet_runs_with_preamble_in_a_removed_temp_dir(settings_for) -> None:
    settings = settings_for(execution_preamble="import math\nANSWER = 41")
    outcome = call("import os\nprint(ANSWER + 1, math.floor(2.5))\nprint(os.path.basename(os.getcwd()))", settings)
    assert outcome.status == "ok"
    lines = outcome.output.splitlines()
    assert lines[0] == "42 2"
    assert lines[1].startswith("snippet-")
    assert not outcome.truncated and outcome.duration_s > 0
    assert leftover_snippet_dirs(settings) == []


def test_local_snippet_without_output_says_so(settings_for) -> None:
    outcome = call("x = 1", settings_for())
    assert outcome.status == "ok"
    assert outcome.output == "[code_interpreter: finished with no output]"


def test_local_exception_reports_traceback_of_the_snippet_only(settings_for) -> None:
    outcome = call("print('before')\n1 / 0", settings_for())
    assert outcome.status == "error"
    assert outcome.output.startswith("before\n")
    assert 'File "snippet.py", line 2' in outcome.output
    assert "ZeroDivisionError: division by zero" in outcome.output
    assert "_runner.py" not in outcome.output
    assert outcome.output.endswith("[code_interpreter: exited with status 1]")


def test_local_syntax_error_and_system_exit(settings_for) -> None:
    settings = settings_for()
    syntax = call("def f(:\n    pass", settings)
    assert syntax.status == "error" and "SyntaxError" in syntax.output
    exited = call("import sys\nprint('bye')\nsys.exit(3)", settings)
    assert exited.status == "error" and "bye" in exited.output and "exited with status 3" in exited.output


@pytest.mark.slow
def test_local_timeout_kills_every_descendant_and_keeps_partial_output(settings_for) -> None:
    settings = settings_for(code_timeout_seconds="1")
    marker = unique_sleep_seconds()
    code = textwrap.dedent(f"""
        import os, subprocess, time
        print("started", flush=True)
        subprocess.Popen(["sleep", "{marker}"], start_new_session=True)
        while True:
            time.sleep(0.05)
    """)
    started = time.monotonic()
    outcome = call(code, settings)
    assert time.monotonic() - started < 5
    assert outcome.status == "timeout"
    assert outcome.output.startswith("started\n")
    assert "timed out after 1 s" in outcome.output
    assert_no_process_with(marker)
    assert leftover_snippet_dirs(settings) == []


def test_local_process_left_behind_is_killed_and_output_kept(settings_for) -> None:
    marker = unique_sleep_seconds()
    code = (
        f"import os\nprint('before', flush=True)\nif os.fork() == 0:\n    os.setsid()\n"
        f"    os.execv('/bin/sleep', ['sleep', '{marker}'])\nprint('after')\n"
    )
    started = time.monotonic()
    outcome = call(code, settings_for())
    assert time.monotonic() - started < 30
    assert outcome.status == "ok" and outcome.output == "before\nafter\n"
    assert_no_process_with(marker)


def test_local_huge_output_is_truncated_with_marker_and_keeps_the_end(settings_for) -> None:
    code = "import sys\nfor i in range(20000):\n    print('line', i, 'x' * 40)\nraise ValueError('the end')"
    outcome = call(code, settings_for())
    assert outcome.status == "error"
    assert outcome.truncated
    assert outcome.output.startswith("line 0 ")
    assert "[... output truncated: the snippet wrote" in outcome.output
    assert "ValueError: the end" in outcome.output
    assert len(outcome.output) < OUTPUT_LIMIT + 300


def test_local_memory_limit_applies(settings_for) -> None:
    outcome = call(
        "import numpy as np\nx = np.ones(400 * 1024 * 1024 // 8)\nprint('allocated')",
        settings_for(sandbox_memory_limit_mb="256"),
    )
    assert outcome.status == "error"
    assert "MemoryError" in outcome.output
    assert "allocated" not in outcome.output


def test_local_environment_has_no_secrets(settings_for, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-for-snippets")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-test-not-for-snippets")
    outcome = call(
        "import os\nfor name, value in sorted(os.environ.items()):\n    print(name, '=', value)", settings_for()
    )
    assert outcome.status == "ok"
    assert "PATH =" in outcome.output
    for leaked in ("sk-test-not-for-snippets", "tok-test-not-for-snippets", "OPENAI_API_KEY", "MY_SERVICE_TOKEN"):
        assert leaked not in outcome.output


def test_missing_interpreter_is_an_error(settings_for, tmp_path: Path) -> None:
    outcome = call("print(1)", settings_for(python_binary=str(tmp_path / "no-python")))
    assert outcome.status == "error"
    assert "could not start" in outcome.output


# ---------------------------------------------------------------------------
# Kernel confinement: no data, no writes outside the snippet's folder, no secrets, no network
# ---------------------------------------------------------------------------


@pytest.fixture
def confined(settings_for, tmp_path: Path):
    settings = settings_for()
    scicode = Path(settings.data_dir) / "scicode"
    (scicode / "test_data.h5").write_bytes(b"\x89HDF\r\n\x1a\n fake targets")
    (scicode / "problems_dev.jsonl").write_text('{"problem_id": "1"}\n')
    elsewhere = tmp_path / "copy" / "targets.hdf5"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(b"targets elsewhere")
    return settings, scicode, elsewhere


@pytest.mark.parametrize(
    "snippet",
    [
        "open({targets!r}, 'rb').read()",
        "open({problems!r}).read()",
        "import os\nos.open({targets!r}, os.O_RDONLY)",
        "import numpy\nnumpy.fromfile({targets!r}, dtype='uint8')",
        "import os\nos.listdir({scicode!r})",
        "import os\nos.symlink({targets!r}, 'innocent.bin')\nopen('innocent.bin', 'rb').read()",
        "import shutil\nshutil.copyfile({elsewhere!r}, 'copy.bin')",
        "import h5py\nh5py.File({targets!r}, 'r')",
        "import os\nfd = os.open({scicode!r} + '/..', os.O_RDONLY)\nos.open('scicode/test_data.h5', os.O_RDONLY, dir_fd=fd)",
    ],
)
def test_snippets_cannot_read_the_benchmark_data(confined, snippet: str) -> None:
    settings, scicode, elsewhere = confined
    code = snippet.format(
        targets=str(scicode / "test_data.h5"),
        problems=str(scicode / "problems_dev.jsonl"),
        scicode=str(scicode),
        elsewhere=str(elsewhere),
    )
    outcome = call(code, settings)
    assert outcome.status == "error", outcome.output
    assert any(word in outcome.output for word in ("PermissionError", "Permission denied", "unable to")), outcome.output
    assert "fake targets" not in outcome.output and "targets elsewhere" not in outcome.output


def test_snippets_cannot_write_delete_or_rename_outside_their_folder(settings_for, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    settings = settings_for()
    attacks = [
        f"open({str(victim)!r}, 'w').write('x')",
        f"import os\nos.remove({str(victim)!r})",
        f"import os\nos.rename({str(victim)!r}, {str(tmp_path / 'moved')!r})",
        f"import os\nos.unlink('victim.txt', dir_fd=os.open({str(tmp_path)!r}, os.O_RDONLY))",
        f"import os\nos.open('new.txt', os.O_WRONLY | os.O_CREAT, dir_fd=os.open({str(tmp_path)!r}, os.O_RDONLY))",
        "open('/tmp/scicode-snippet-escape.txt', 'w').write('x')",
    ]
    for attack in attacks:
        outcome = call(attack, settings)
        assert outcome.status == "error" and "PermissionError" in outcome.output, (attack, outcome.output)
    assert (
        victim.read_text() == "untouched" and not (tmp_path / "moved").exists() and not (tmp_path / "new.txt").exists()
    )
    assert not Path("/tmp/scicode-snippet-escape.txt").exists()


def test_snippets_cannot_read_the_environment_of_other_processes(settings_for) -> None:
    secret = "sk-snippet-parent-7d1e"
    victim = subprocess.Popen(["sleep", "60"], env={"OPENAI_API_KEY": secret, "PATH": os.defpath})
    try:
        code = f"import os\nprint(open('/proc/{victim.pid}/environ').read())"
        outcome = call(code, settings_for())
        assert outcome.status == "error" and "PermissionError" in outcome.output
        scan = call("import os\nfor pid in os.listdir('/proc'):\n    print(pid)", settings_for())
        assert scan.status == "error" and secret not in scan.output
    finally:
        victim.kill()
        victim.wait()


def test_snippets_have_no_network_even_to_loopback(settings_for) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        outcome = call(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)", settings_for())
        assert outcome.status == "error"
        assert "Network is unreachable" in outcome.output or "Permission denied" in outcome.output
        server.settimeout(0.5)
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()


def test_confined_snippets_use_files_and_libraries_normally(confined) -> None:
    settings, _, _ = confined
    code = textwrap.dedent("""
        import numpy as np, scipy.integrate, sympy, subprocess
        np.save("array.npy", np.arange(3))
        with open("notes.txt", "w") as handle:
            handle.write("hi")
        child = subprocess.run(["python3", "-c", "print(6 * 7)"], capture_output=True, text=True).stdout.strip()
        print(np.load("array.npy").sum(), open("notes.txt").read(), sympy.Integer(2) ** 10, child)
    """)
    outcome = call(code, settings)
    assert outcome.status == "ok", outcome.output
    assert outcome.output == "3 hi 1024 42\n"


# ---------------------------------------------------------------------------
# SandboxFusion-compatible service
# ---------------------------------------------------------------------------


@pytest.fixture
def sandbox_settings(settings_for):
    def make(url: str, **values: str):
        return settings_for(sandbox_url=url, sandbox_retry_delay_seconds="0.01", code_timeout_seconds="7", **values)

    return make


def test_sandbox_success_sends_the_documented_request(sandbox_settings) -> None:
    with FakeSandbox([(200, run_result(stdout="42\n"))]) as sandbox:
        settings = sandbox_settings(sandbox.url, execution_preamble="X = 41", sandbox_memory_limit_mb="512")
        outcome = call("print(X + 1)", settings)
    assert (outcome.status, outcome.output) == ("ok", "42\n")
    [request] = sandbox.received
    assert request == {
        "path": "/run_code",
        "code": tools.sandbox_program("print(X + 1)", settings),
        "language": "python",
        "run_timeout": 7.0,
        "memory_limit_MB": 512,
    }
    assert leftover_snippet_dirs(settings) == []


def run_program(program: str, tmp_path: Path) -> subprocess.CompletedProcess:
    source = tmp_path / "sent.py"
    source.write_text(program, encoding="utf-8")
    env = {"PATH": os.defpath}
    return subprocess.run(
        [sys.executable, str(source)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
    )


def test_sandbox_program_sets_single_thread_blas_then_runs_preamble_and_snippet(settings_for, tmp_path) -> None:
    settings = settings_for(execution_preamble="X = 41")
    code = "from __future__ import annotations\nimport os\nprint(X + 1, os.environ['OPENBLAS_NUM_THREADS'])\n"
    completed = run_program(tools.sandbox_program(code, settings), tmp_path)
    assert (completed.returncode, completed.stdout) == (0, "42 1\n")


def test_sandbox_program_traceback_names_the_snippet_lines_only(settings_for, tmp_path) -> None:
    completed = run_program(tools.sandbox_program("x = 1\nprint(y)\n", settings_for()), tmp_path)
    assert completed.returncode == 1
    assert 'File "snippet.py", line 2' in completed.stderr and "NameError" in completed.stderr
    assert "sent.py" not in completed.stderr and "exec(" not in completed.stderr


def test_sandbox_program_keeps_placeholder_text_in_the_snippet(settings_for, tmp_path) -> None:
    completed = run_program(tools.sandbox_program("print('__PREAMBLE__ __SNIPPET__')", settings_for()), tmp_path)
    assert completed.stdout == "__PREAMBLE__ __SNIPPET__\n"


def test_a_lone_surrogate_in_a_sandbox_reply_reaches_the_model_as_valid_text(sandbox_settings) -> None:
    with FakeSandbox([(200, run_result(stdout="a\ud800b\n"))]) as sandbox:
        outcome = call("print(1)", sandbox_settings(sandbox.url))
    assert (outcome.status, outcome.output) == ("ok", "a\ufffdb\n")


def test_sandbox_memory_limit_zero_sends_no_limit(sandbox_settings) -> None:
    with FakeSandbox([(200, run_result(stdout="1\n"))]) as sandbox:
        call("print(1)", sandbox_settings(sandbox.url, sandbox_memory_limit_mb="0"))
    [request] = sandbox.received
    assert "memory_limit_MB" not in request


def test_sandbox_time_limit_is_a_timeout_with_partial_output(sandbox_settings) -> None:
    with FakeSandbox([(200, run_result("TimeLimitExceeded", stdout="started\n", return_code=-1))]) as sandbox:
        outcome = call("while True: pass", sandbox_settings(sandbox.url))
    assert outcome.status == "timeout"
    assert outcome.output.startswith("started\n") and "timed out after 7 s" in outcome.output


def test_sandbox_failed_run_is_an_error_with_stderr(sandbox_settings) -> None:
    with FakeSandbox([(200, run_result(stderr="Traceback ...\nNameError: y\n", return_code=1))]) as sandbox:
        outcome = call("print(y)", sandbox_settings(sandbox.url))
    assert outcome.status == "error"
    assert "NameError: y" in outcome.output and "exited with status 1" in outcome.output


def test_sandbox_500_then_success_is_retried(sandbox_settings) -> None:
    script: list[tuple[int, dict[str, object]]] = [
        (500, {"detail": "busy"}),
        (200, {"status": "SandboxError", "message": "worker died", "run_result": None}),
        (200, run_result(stdout="ok\n")),
    ]
    with FakeSandbox(script) as sandbox:
        outcome = call("print('ok')", sandbox_settings(sandbox.url))
    assert (outcome.status, outcome.output) == ("ok", "ok\n")
    assert len(sandbox.received) == 3


def test_sandbox_always_500_is_a_sandbox_error_after_the_retries(sandbox_settings) -> None:
    with FakeSandbox([(500, {"detail": "down"})]) as sandbox:
        outcome = call("print(1)", sandbox_settings(sandbox.url, sandbox_max_retries="2"))
    assert outcome.status == "sandbox_error"
    assert len(sandbox.received) == 3
    assert "HTTP 500" in outcome.output and "gave up after 3 attempts" in outcome.output
    assert "the snippet was not run" in outcome.output


def test_sandbox_client_error_is_not_retried(sandbox_settings) -> None:
    with FakeSandbox([(400, {"detail": "bad language"})]) as sandbox:
        outcome = call("print(1)", sandbox_settings(sandbox.url))
    assert outcome.status == "sandbox_error"
    assert len(sandbox.received) == 1 and "HTTP 400" in outcome.output


def test_sandbox_unreachable_is_a_sandbox_error(sandbox_settings) -> None:
    with FakeSandbox([(200, run_result())]) as sandbox:
        url = sandbox.url
    outcome = call("print(1)", sandbox_settings(url, sandbox_max_retries="1"))
    assert outcome.status == "sandbox_error" and "cannot reach" in outcome.output


def test_sandbox_no_proxy_bypasses_proxy_variables(sandbox_settings, monkeypatch) -> None:
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    with FakeSandbox([(200, run_result(stdout="direct\n"))]) as sandbox:
        direct = call("print(1)", sandbox_settings(sandbox.url))
        through_proxy = call(
            "print(1)", sandbox_settings(sandbox.url, sandbox_no_proxy="false", sandbox_max_retries="0")
        )
    assert (direct.status, direct.output) == ("ok", "direct\n")
    assert through_proxy.status == "sandbox_error"
    assert len(sandbox.received) == 1


def test_a_relative_code_workdir_works(settings_for, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    outcome = call("print('relative ok')", settings_for(code_workdir="rel/interpreter"))
    assert outcome.status == "ok" and outcome.output == "relative ok\n", outcome.output
