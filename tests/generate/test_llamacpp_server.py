"""Against a real llama.cpp-style server (llama-cpp-python 0.3.36 serving SmolLM2-135M-Instruct on the CPU), through
the real `openai` client: what fake servers cannot show.

The server handles one request at a time and is slow on a shared machine, so these tests are few: one doit run of
problems 1 and 4 per mode (answers capped at 128 tokens; tool_use with `tool_choice=code_interpreter` and two model
calls per step), the preflight's refusals, which cost no generation, and the client's errors on short prompts. Each
run prints the status line of every step and the requests the server saw. In CI they fail when the server cannot
start (tests/conftest.py: `llamacpp_server`).
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from stages.config.settings import load_settings
from stages.exit_codes import MODEL_NOT_SERVED, PROTOCOL_NOT_SERVED, TOOLS_REFUSED
from stages.generate.client import ModelCallError, ModelClient
from stages.generate.loops import run_step
from stages.generate.prompts import StepPrompt
from stages.statuses import STEP_STATUSES
from tests.conftest import LlamaServer
from tests.support.pipeline_support import assert_ok, data_args, load_json, output_of, run_dir, run_doit
from tests.support.run_artifacts import json_at, json_number
from tests.support.run_files import summary_file

pytestmark = pytest.mark.slow

PROBLEMS = ("1", "4")
STEPS = ("1.1", "4.1")
MAX_TOKENS = 128
RUN_TIMEOUT_SECONDS = 5400  # each request is seconds on an idle core, minutes on a loaded shared machine
MODEL_PARAMS = json.dumps({"temperature": 0, "seed": 7})


def server_args(server: LlamaServer, **extra: str) -> tuple[str, ...]:
    values = {
        "model": server.model,
        "base_url": server.base_url,
        "model_params": MODEL_PARAMS,
        "concurrency": "1",  # the server's one slot: a step's follow-up calls reuse its prompt's cache
        **extra,
    }
    return tuple(f"{name}={value}" for name, value in values.items())


def run_against(
    server: LlamaServer, workdir: Path, data_dir: Path, targets: Path | None, *args: str
) -> tuple[subprocess.CompletedProcess[str], Counter[str]]:
    """A doit run of problems 1 and 4, and the requests the server saw during it (by `METHOD path status`)."""
    before = len(server.requests())
    result = run_doit(
        workdir,
        *data_args(data_dir, targets),
        "split=validation",
        f"sample_ids={','.join(PROBLEMS)}",
        *args,
        api_key=None,  # a local endpoint needs no key
        timeout=RUN_TIMEOUT_SECONDS,
    )
    seen = Counter(f"{method} {path} {status}" for method, path, status in server.requests()[before:])
    return result, seen


def step_lines(run: Path) -> dict[str, dict]:
    """Per step: its verdict (status, reason) and its generation (status, finish reason, calls)."""
    lines = {}
    for problem_id in PROBLEMS:
        generation = load_json(run / "generations" / f"{problem_id}.json")
        details = load_json(run / "details" / f"{problem_id}.json")
        verdicts = {s["step_id"]: s for s in details["attempts"][0]["meta"]["evaluation"]["steps"]}
        for step in generation["steps"]:
            verdict = verdicts[step["step_id"]]
            lines[step["step_id"]] = {
                "status": verdict["status"],
                "reason": verdict["reason"],
                "generation": step["status"],
                "finish_reason": step["finish_reason"],
                "calls": step["trajectory"]["calls"],
                "messages": step["trajectory"]["messages"],
                "tool_results": step["trajectory"].get("tool_results") or [],
            }
    return lines


def show(mode: str, lines: dict[str, dict], seen: Counter[str]) -> None:
    print(f"\n{mode}: requests the server saw: {sum(seen.values())} ({dict(seen)})")
    for step_id, line in lines.items():
        calls = ", ".join(f"{c.get('finish_reason')} {c['latency_s']:.1f}s" for c in line["calls"])
        print(f"  {step_id}: {line['status']} ({line['generation']}; calls: {calls}): {line['reason'][:160]}")


def assert_every_step_has_a_verdict(lines: dict[str, dict]) -> None:
    assert sorted(lines) == sorted(STEPS)
    for step_id, line in lines.items():
        assert line["status"] in STEP_STATUSES and line["reason"] is not None, step_id
        truncated = line["generation"] == "truncated" or any(c.get("finish_reason") == "length" for c in line["calls"])
        assert truncated == line["reason"].startswith("truncated: "), line  # a cut answer says so, only a cut one
        assert all(c["usage"]["output_tokens"] <= MAX_TOKENS for c in line["calls"])  # the cap was sent and obeyed


# What a run asks of the server besides its model calls: the preflight's GET /models, and the endpoint's report of
# itself (stages/generate/endpoint_report.py: its /models entry and llama.cpp's /props, which llama-cpp-python lacks).
ENDPOINT_REPORT = {"GET /v1/models 200": 2, "GET /props 404": 1}


def test_naive_run_of_problems_1_and_4(
    llamacpp_server: LlamaServer, workdir: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    result, seen = run_against(
        llamacpp_server,
        workdir,
        staged_data_dir,
        dev_targets,
        *server_args(llamacpp_server, mode="naive", max_tokens=str(MAX_TOKENS)),
    )
    assert_ok(result)
    run = run_dir(workdir, llamacpp_server.model, "validation-naive-bg")
    lines = step_lines(run)
    show("naive", lines, seen)
    assert_every_step_has_a_verdict(lines)
    assert all(len(line["calls"]) == 1 for line in lines.values())
    # the preflight's GET /models and one probe, the endpoint's report of itself (GET /models and /props, which
    # llama-cpp-python does not serve), then one request per step; nothing refused, nothing retried
    assert seen == Counter({**ENDPOINT_REPORT, "POST /v1/chat/completions 200": 1 + len(STEPS)})
    assert "preflight: endpoint ok: " in result.stdout and f"serves model={llamacpp_server.model}" in result.stdout
    summary = load_json(summary_file(run, "json"))
    assert summary["subproblem_total"] == len(STEPS) and summary["failed_problems"] == []


def test_tool_use_run_of_problems_1_and_4_round_trips_tool_calls(
    llamacpp_server: LlamaServer, workdir: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    result, seen = run_against(
        llamacpp_server,
        workdir,
        staged_data_dir,
        dev_targets,
        *server_args(
            llamacpp_server,
            mode="tool_use",
            tool_choice="code_interpreter",
            tool_use_max_loops="2",
            max_tokens=str(MAX_TOKENS),
        ),
    )
    assert_ok(result)
    run = run_dir(workdir, llamacpp_server.model, "validation-tool_use-bg")
    lines = step_lines(run)
    show("tool_use", lines, seen)
    assert_every_step_has_a_verdict(lines)
    for step_id, line in lines.items():
        calls, messages = line["calls"], line["messages"]
        assert 2 <= len(calls) <= 3, step_id  # a forced tool call, then at most one more and the final answer
        first_turn = messages[1]
        assert first_turn["role"] == "assistant" and first_turn["tool_calls"], step_id  # the forced call
        assert first_turn["content"] is None  # as the server answered it; it was sent back as ""
        assert line["tool_results"] and all(r["status"] in ("ok", "error", "timeout") for r in line["tool_results"])
        assert messages[2]["role"] == "tool"
    # Every request was answered: the tool-call turns sent back were accepted (with null content they were HTTP 500).
    model_calls = sum(len(line["calls"]) for line in lines.values())
    assert seen == Counter({**ENDPOINT_REPORT, "POST /v1/chat/completions 200": 2 + model_calls})
    summary = load_json(summary_file(run, "json"))
    assert summary["tool_use"]["behaved_as_naive"] is False and summary["tool_calls"]["total"] >= len(STEPS)


def test_the_preflight_refuses_what_this_server_cannot_do(
    llamacpp_server: LlamaServer, workdir: Path, staged_data_dir: Path
) -> None:
    wrong, seen = run_against(
        llamacpp_server, workdir, staged_data_dir, None, *server_args(llamacpp_server, model="gpt-4o-mini")
    )
    assert wrong.returncode == MODEL_NOT_SERVED.code, output_of(wrong)
    assert "model=gpt-4o-mini is not served" in wrong.stderr and "which serves: smollm2-135m" in wrong.stderr
    assert seen == Counter({"GET /v1/models 200": 1})

    responses, seen = run_against(
        llamacpp_server, workdir, staged_data_dir, None, *server_args(llamacpp_server, api_protocol="openai-responses")
    )
    assert responses.returncode == PROTOCOL_NOT_SERVED.code, output_of(responses)
    assert "this server has no Responses API: use api_protocol=openai-chat" in responses.stderr
    assert seen == Counter({"GET /v1/models 200": 1, "POST /v1/responses 404": 1})

    required, seen = run_against(
        llamacpp_server,
        workdir,
        staged_data_dir,
        None,
        *server_args(llamacpp_server, tool_choice="required", max_retries="0"),
    )
    assert required.returncode == TOOLS_REFUSED.code, output_of(required)
    assert "refuses a request that offers tools with tool_choice=required: HTTP 500" in required.stderr
    # It runs chatml-function-calling already (the same request without tool_choice is accepted): no advice to.
    assert "serves tool calls but not that choice" in required.stderr
    assert "--chat_format chatml-function-calling" not in required.stderr
    assert seen == Counter(
        {"GET /v1/models 200": 1, "POST /v1/chat/completions 200": 2, "POST /v1/chat/completions 500": 1}
    )


def test_the_clients_view_of_this_server(llamacpp_server: LlamaServer, tmp_path: Path) -> None:
    settings = load_settings(
        {
            "model": llamacpp_server.model,
            "base_url": llamacpp_server.base_url,
            "max_tokens": "8",
            "mode": "naive",
            "max_retries": "0",
            "model_params": MODEL_PARAMS,
            "code_workdir": str(tmp_path / "interpreter"),
        },
        cwd=tmp_path,
    )
    before = len(llamacpp_server.requests())
    with ModelClient(settings) as model:
        # A cut answer is truncated, and the server reports its processing time.
        outcome = run_step(model, settings, StepPrompt("1.1", "Write a long story about a python.", "0" * 64, "f"))
        assert outcome.status == "truncated" and outcome.finish_reason == "length"
        assert json_at(outcome.trajectory, "calls", 0, "usage", "output_tokens") == 8
        assert json_number(json_at(outcome.trajectory, "calls", 0, "server", "processing_ms")) > 0
        # A prompt longer than the context (8192 tokens) is a context-length failure at the first answer.
        with pytest.raises(ModelCallError) as too_long:
            model.complete([{"role": "user", "content": "word " * 9000}], tools=None, step_id="1.1")
    assert too_long.value.context_length and too_long.value.status == 400
    assert "maximum context length is 8192 tokens" in str(too_long.value)
    assert [status for _, _, status in llamacpp_server.requests()[before:]] == [200, 400]


def test_the_preflight_helps_with_this_server(llamacpp_server: LlamaServer, tmp_path: Path) -> None:
    """This server has no `/props` or `/slots` (404) and serves one request at a time: the preflight sees the queue
    in probes sent together, and notes that max_tokens is unset; the line names the settings to change."""
    from stages.preflight.endpoint import check_endpoint

    settings = load_settings(
        {
            "model": llamacpp_server.model,
            "base_url": llamacpp_server.base_url,
            "mode": "naive",
            "concurrency": "8",
            "model_params": MODEL_PARAMS,
            "code_workdir": str(tmp_path / "interpreter"),
        },
        cwd=tmp_path,
    )
    before = len(llamacpp_server.requests())
    lines = check_endpoint(settings)
    print("\n".join(lines))
    notes = [line for line in lines if line.startswith("note: ")]
    assert len(notes) == 2, lines
    assert "max_tokens is unset" in notes[0] and "set max_tokens=" in notes[0]
    assert "request(s) at once (4 requests sent together took" in notes[1] and "concurrency=8" in notes[1]
    seen = Counter(f"{method} {path} {status}" for method, path, status in llamacpp_server.requests()[before:])
    assert seen == Counter(
        {"GET /v1/models 200": 1, "GET /props 404": 1, "GET /slots 404": 1, "POST /v1/chat/completions 200": 5}
    )
