"""Endpoint preflight and run stops: real `doit` runs against local scripted servers (and none at all).

Every way an endpoint cannot serve a run ends the run before any step is asked, with one line and an exit code of
its own (stages/exit_codes.py), and no summary; a key refused mid-run stops the run with one line too. A no-op
rerun runs no preflight and imports no model client.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from stages.exit_codes import (
    ENDPOINT_UNREACHABLE,
    KEY_REFUSED,
    MODEL_NOT_SERVED,
    NO_API_KEY,
    PROTOCOL_NOT_SERVED,
    SCHEDULER_UNREACHABLE,
    TOOLS_REFUSED,
)
from stages.generate.server import ErrorReply, ModelRequest, ModelServer, Reply
from stages.preflight.local_server import QUEUE_PROBES
from tests.conftest import free_port
from tests.support.pipeline_support import (
    NOTHING_TO_DO,
    PROBE_REPLY,
    TEST_API_KEY,
    ScriptedModel,
    assert_ok,
    data_args,
    forbidden_imports,
    is_preflight_probe,
    load_json,
    model_args,
    output_of,
    run_dir,
    run_doit,
    run_doit_listing_imports,
    steps_of,
)
from tests.support.run_files import summary_file

PROBLEMS = ("1", "4")
PREFLIGHT_SECONDS = 30.0  # a failed preflight ends a run within this (it was 46 s of retries for a dead endpoint)


def common_args(data_dir: Path, targets: Path) -> tuple[str, ...]:
    return (*data_args(data_dir, targets), "split=validation", f"sample_ids={','.join(PROBLEMS)}")


def stopped_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one line a stopped run ends with; no traceback, no per-task failure lines."""
    output = output_of(result)
    assert "Traceback" not in output and "FAILED generate:" not in output, output
    lines = [line for line in result.stderr.splitlines() if line.startswith("scicode: ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def assert_nothing_asked(workdir: Path, model: str, run: str = "validation-tool_use-bg") -> None:
    folder = run_dir(workdir, model, run)
    assert not list(folder.glob("summary*")) and not (folder / "details").exists()
    assert not list((folder / "generations").glob("*.json")) if (folder / "generations").exists() else True


def timed_run(workdir: Path, *args: str, api_key: str | None = TEST_API_KEY) -> subprocess.CompletedProcess[str]:
    started = time.monotonic()
    result = run_doit(workdir, *args, api_key=api_key)
    assert time.monotonic() - started < PREFLIGHT_SECONDS + 15, output_of(result)
    return result


def test_a_dead_endpoint_is_one_line_at_once(workdir: Path, staged_data_dir: Path, dev_targets: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    result = timed_run(workdir, *common_args(staged_data_dir, dev_targets), "model=m1", f"base_url={url}")
    assert result.returncode == ENDPOINT_UNREACHABLE.code, output_of(result)
    line = stopped_line(result)
    assert f"cannot reach {url}" in line and "is the server running" in line and "no model call was made" in line
    assert_nothing_asked(workdir, "m1")


def test_a_wrong_model_name_is_refused_naming_the_served_ids(
    workdir: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    model = ScriptedModel(steps_of(staged_data_dir, PROBLEMS, "validation"))
    with ModelServer(model, models=("smollm2-135m", "other-model")) as server:
        result = timed_run(workdir, *common_args(staged_data_dir, dev_targets), *model_args(server, "gpt-typo"))
        assert result.returncode == MODEL_NOT_SERVED.code, output_of(result)
        line = stopped_line(result)
        assert "model=gpt-typo is not served" in line and "smollm2-135m, other-model" in line
        assert "check_model=false" in line
        assert model.total() == 0 and model.probes == 0  # only GET /models
        assert_nothing_asked(workdir, "gpt-typo")
        # A gateway whose list holds aliases: check_model=false lets the run go on.
        allowed = run_doit(
            workdir,
            "generate",
            *common_args(staged_data_dir, dev_targets),
            *model_args(server, "gpt-typo", check_model="false", mode="naive"),
            api_key=TEST_API_KEY,
        )
        assert_ok(allowed)
        assert "does not list model=gpt-typo (check_model=false)" in allowed.stdout
        # the plain probe, and QUEUE_PROBES sent together to see whether this local server queues requests
        assert model.counts() == {"1.1": 1, "4.1": 1} and model.probes == 1 + QUEUE_PROBES


def test_a_404_model_answer_is_a_model_not_served(workdir: Path, staged_data_dir: Path, dev_targets: Path) -> None:
    def not_found(request: ModelRequest) -> Reply:
        return ErrorReply(404, "The model `gpt-typo` does not exist", code="model_not_found")

    with ModelServer(not_found) as server:  # lists no model: the probe's answer tells
        result = timed_run(workdir, *common_args(staged_data_dir, dev_targets), *model_args(server, "gpt-typo"))
        assert len(server.requests) == 1  # a 404 is not retried
    assert result.returncode == MODEL_NOT_SERVED.code, output_of(result)
    assert "model=gpt-typo is not served" in stopped_line(result)
    assert_nothing_asked(workdir, "gpt-typo")


def test_a_server_without_the_responses_api_says_which_protocol_to_use(
    workdir: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    model = ScriptedModel(steps_of(staged_data_dir, PROBLEMS, "validation"))
    with ModelServer(model, models=("acme-coder-1",), protocols=("openai-chat",)) as server:
        result = timed_run(
            workdir, *common_args(staged_data_dir, dev_targets), *model_args(server, api_protocol="openai-responses")
        )
    assert result.returncode == PROTOCOL_NOT_SERVED.code, output_of(result)
    assert "this server has no Responses API: use api_protocol=openai-chat" in stopped_line(result)


def test_a_remote_endpoint_without_a_key_is_refused_before_any_request(
    workdir: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    result = timed_run(
        workdir,
        *common_args(staged_data_dir, dev_targets),
        "model=gpt-4o-mini",
        "base_url=https://api.example.invalid/v1",
        api_key=None,
    )
    assert result.returncode == NO_API_KEY.code, output_of(result)
    line = stopped_line(result)
    assert "no API key for model=gpt-4o-mini at https://api.example.invalid/v1" in line and "OPENAI_API_KEY" in line
    assert_nothing_asked(workdir, "gpt-4o-mini")


def test_a_refused_key_is_one_line(workdir: Path, staged_data_dir: Path, dev_targets: Path) -> None:
    model = ScriptedModel(steps_of(staged_data_dir, PROBLEMS, "validation"))
    with ModelServer(model) as server:
        result = timed_run(workdir, *common_args(staged_data_dir, dev_targets), *model_args(server), api_key="sk-bad")
    assert result.returncode == KEY_REFUSED.code, output_of(result)
    line = stopped_line(result)
    assert "refused the key in OPENAI_API_KEY" in line and "HTTP 401" in line and "sk-bad" not in line
    assert model.total() == 0


def test_a_server_that_refuses_tools_is_caught_before_tool_use(
    workdir: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    """As llama-cpp-python answers tool_choice=required: HTTP 500 with an empty message."""
    model = ScriptedModel(steps_of(staged_data_dir, PROBLEMS, "validation"))

    def refuses_required(request: ModelRequest) -> Reply:
        if request.params.get("tool_choice") == "required":
            return ErrorReply(500, "")
        return model(request)

    with ModelServer(refuses_required) as server:
        result = timed_run(
            workdir, *common_args(staged_data_dir, dev_targets), *model_args(server, tool_choice="required")
        )
    assert result.returncode == TOOLS_REFUSED.code, output_of(result)
    line = stopped_line(result)
    assert "refuses a request that offers tools with tool_choice=required" in line and "HTTP 500" in line
    # It took the same request without tool_choice: it serves tool calls, so the advice is about the choice only.
    assert "serves tool calls but not that choice" in line and "chatml-function-calling" not in line
    assert model.total() == 0 and model.probes == 2  # the plain probe and the one with tools but no tool_choice


def test_an_unreachable_dask_scheduler_is_one_line(workdir: Path, staged_data_dir: Path, dev_targets: Path) -> None:
    scheduler = f"tcp://127.0.0.1:{free_port()}"
    result = timed_run(
        workdir, *common_args(staged_data_dir, dev_targets), "executor=dask", f"scheduler={scheduler}", api_key=None
    )
    assert result.returncode == SCHEDULER_UNREACHABLE.code, output_of(result)
    assert f"cannot reach the Dask scheduler at {scheduler}" in stopped_line(result)


class RevokedAfter(ScriptedModel):
    """Answers the preflight and the first `answers` steps, then refuses the key (a key revoked mid-run)."""

    def __init__(self, steps: dict, answers: int) -> None:
        super().__init__(steps)
        self.answers = answers

    def __call__(self, request: ModelRequest) -> Reply:
        if not is_preflight_probe(request) and self.total() >= self.answers:
            return ErrorReply(401, "Incorrect API key provided", code="invalid_api_key")
        return super().__call__(request)


def run_with_key_revoked_after(
    workdir: Path, staged_data_dir: Path, dev_targets: Path, *, answers: int, concurrency: int
) -> subprocess.CompletedProcess[str]:
    """A naive run against a server that refuses the key after `answers` answers, `concurrency` calls in flight."""
    model = RevokedAfter(steps_of(staged_data_dir, PROBLEMS, "validation"), answers=answers)
    with ModelServer(model) as server:
        return run_doit(
            workdir,
            *common_args(staged_data_dir, dev_targets),
            *model_args(server, mode="naive", concurrency=str(concurrency)),
            api_key=TEST_API_KEY,
        )


def test_a_key_refused_mid_run_stops_the_run_with_one_line(
    workdir: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    result = run_with_key_revoked_after(workdir, staged_data_dir, dev_targets, answers=1, concurrency=1)
    assert result.returncode == KEY_REFUSED.code, output_of(result)
    line = stopped_line(result)
    assert "HTTP 401" in line and "the key was refused mid-run" in line and "finished work is saved" in line
    run = run_dir(workdir, "acme-coder-1", "validation-naive-bg")
    assert not list(run.glob("summary*"))
    records = {path.stem: load_json(path)["status"] for path in (run / "generations").glob("*.json")}
    assert sorted(records.values()) == ["complete", "error"], records  # the answered problem is kept


def test_a_key_refused_at_the_first_real_call_after_a_passing_preflight_is_the_key_line(
    workdir: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    """Two problems in flight, the first real call refused: exit 22 and the key's line, not "model call failed for
    every problem ... check model= and base_url=" (exit 2)."""
    result = run_with_key_revoked_after(workdir, staged_data_dir, dev_targets, answers=0, concurrency=2)
    assert result.returncode == KEY_REFUSED.code, output_of(result)
    line = stopped_line(result)
    assert "HTTP 401" in line and "the key was refused mid-run" in line, line
    assert "every problem" not in output_of(result)


@pytest.mark.slow
def test_a_noop_rerun_runs_no_preflight_and_imports_no_client(
    workdir: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    model = ScriptedModel(steps_of(staged_data_dir, PROBLEMS, "validation"))
    server = ModelServer(model, models=("acme-coder-1",)).start()
    args = (*common_args(staged_data_dir, dev_targets), *model_args(server, mode="naive"))
    try:
        first = run_doit(workdir, *args, api_key=TEST_API_KEY)
    finally:
        server.stop()  # the rerun must not need the endpoint at all
    assert_ok(first)
    assert "preflight: endpoint ok: " in first.stdout and "serves model=acme-coder-1" in first.stdout
    summary = load_json(summary_file(run_dir(workdir, "acme-coder-1", "validation-naive-bg"), "json"))
    assert summary["concurrency"] == 16 and summary["tool_use"]["behaved_as_naive"] is False
    second, imported = run_doit_listing_imports(workdir, *args, api_key=TEST_API_KEY, timeout=120)
    assert second.returncode == 0, output_of(second)
    assert NOTHING_TO_DO in second.stderr and "openai" not in imported
    assert forbidden_imports(imported) == []
    assert "preflight:" not in second.stdout


def test_tool_use_that_never_calls_a_tool_says_it_behaved_as_naive(
    workdir: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    model = ScriptedModel(steps_of(staged_data_dir, PROBLEMS, "validation"))  # answers code, never calls a tool
    with ModelServer(model) as server:
        result = run_doit(
            workdir, *common_args(staged_data_dir, dev_targets), *model_args(server), api_key=TEST_API_KEY
        )
    assert_ok(result)
    run = run_dir(workdir, "acme-coder-1", "validation-tool_use-bg")
    markdown = summary_file(run, "md").read_text(encoding="utf-8")
    assert "**tool_use behaved as naive**: the model made no tool call in 2 model calls" in markdown
    assert "concurrency (model calls in flight at most)" in markdown
    assert load_json(summary_file(run, "json"))["tool_use"]["behaved_as_naive"] is True
    # the plain probe, the one with tools, and QUEUE_PROBES sent together (a local server, concurrency=16)
    assert PROBE_REPLY.text == "ok" and model.probes == 2 + QUEUE_PROBES


def test_the_running_safely_page_lists_every_exit_code() -> None:
    from stages.exit_codes import EXIT_CODES
    from tests.support.pipeline_support import PROJECT_ROOT

    page = (PROJECT_ROOT / "docs" / "running-safely.md").read_text(encoding="utf-8")
    listed = " ".join(page.split("- **Exit codes**", 1)[1].split("\n- ", 1)[0].split())
    assert len({code.code for code in EXIT_CODES}) == len(EXIT_CODES)
    for code in EXIT_CODES:
        assert f" {code.code} " in f" {listed} ", f"exit code {code.code} ({code.meaning}) is not in running-safely.md"


@pytest.mark.slow
def test_a_server_that_restarts_mid_run_is_waited_for(workdir: Path, staged_data_dir: Path, dev_targets: Path) -> None:
    """The server goes away after the first answer and is back 4 s later on the same port: nothing fails."""
    problems = ("1", "3", "4", "19")
    model = ScriptedModel(steps_of(staged_data_dir, problems, "validation"), stall_seconds=0.5)
    server = ModelServer(model).start()
    port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])
    restarted: list[ModelServer] = []

    def restart() -> None:
        deadline = time.monotonic() + 120
        while model.total() < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        server.stop()
        time.sleep(4)
        restarted.append(ModelServer(model, port=port).start())

    watcher = threading.Thread(target=restart, daemon=True)
    watcher.start()
    try:
        result = run_doit(
            workdir,
            *data_args(staged_data_dir, dev_targets),
            "split=validation",
            f"sample_ids={','.join(problems)}",
            *model_args(server, mode="naive", concurrency="1", server_wait_seconds="60"),
            api_key=TEST_API_KEY,
        )
    finally:
        watcher.join(timeout=130)
        for again in restarted:
            again.stop()
    assert_ok(result)
    run = run_dir(workdir, "acme-coder-1", "validation-naive-bg")
    generations = [load_json(path) for path in sorted((run / "generations").glob("*.json"))]
    assert len(generations) == len(problems) and all(g["status"] == "complete" for g in generations)
    waits = [
        retry["error"]
        for g in generations
        for step in g["steps"]
        for call in step["trajectory"]["calls"]
        for retry in call["retry_log"]
    ]
    assert waits and all("cannot reach" in error or "Connection" in error for error in waits), waits
    assert load_json(summary_file(run, "json"))["failed_problems"] == []
