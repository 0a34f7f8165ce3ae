"""Step loops: naive and tool_use, with the real client, the scripted server and the real code interpreter."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from stages.config.settings import load_settings
from stages.generate.client import ModelClient
from stages.generate.loops import (
    FINAL_ANSWER_REQUEST,
    MAX_TOOL_CALLS_RUN_PER_REPLY,
    REMINDER,
    final_status,
    run_step,
    tool_time_budget_seconds,
)
from stages.generate.prompts import StepPrompt
from stages.generate.server import ErrorReply, ModelReply, ModelServer, ToolCallSpec
from tests.generate.scripted import FakeTime, Script
from tests.support.run_artifacts import json_str

CODE_ANSWER = "Here:\n```python\nimport numpy as np\n\ndef f(x):\n    import math\n    return np.sqrt(x)\n```"
CODE = "\n\ndef f(x):\n    import math\n    return np.sqrt(x)\n"


def interpreter_call(call_id: str, code: str) -> ToolCallSpec:
    return ToolCallSpec(call_id, "code_interpreter", json.dumps({"code": code}))


@pytest.fixture(autouse=True)
def instant_backoff(monkeypatch):
    FakeTime().install(monkeypatch)


def make_settings(tmp_path: Path, server: ModelServer, **overrides):
    values = {
        "model": "loop-model",
        "base_url": server.base_url,
        "mode": "tool_use",
        "code_workdir": str(tmp_path / "interpreter"),
        "code_timeout_seconds": "30",
        "max_retries": "1",
    }
    values.update({name: str(value) for name, value in overrides.items()})
    return load_settings(values, cwd=tmp_path)


def run(tmp_path, server, prompt="solve 1.1", **overrides):
    settings = make_settings(tmp_path, server, **overrides)
    with ModelClient(settings) as model:
        return run_step(model, settings, StepPrompt("1.1", prompt, "0" * 64, "f"))


def test_final_status_rules():
    assert final_status(CODE_ANSWER, "stop", "f") == ("ok", CODE)
    assert final_status(CODE_ANSWER, "length", "f") == ("truncated", CODE)
    assert final_status("```python\ndef f(:", "length", "f") == ("truncated", "\ndef f(:")
    # unfenced: code only when the whole text parses and defines the step's name
    assert final_status("import os\ndef f(): pass", "stop", "f") == ("ok", "\ndef f(): pass")
    assert final_status("def f(): pass", "stop", "g") == ("no_code", None)
    assert final_status("Here is f:\ndef f(): pass", "stop", "f") == ("no_code", None)
    assert final_status("def f(): pass", "stop", None) == ("no_code", None)
    assert final_status(None, "stop", "f") == ("no_code", None)


def test_naive_is_one_call_without_tools(tmp_path):
    with ModelServer(Script(ModelReply(text=CODE_ANSWER, prompt_tokens=10, completion_tokens=5))) as server:
        outcome = run(tmp_path, server, mode="naive")
    assert outcome.status == "ok" and outcome.code == CODE and outcome.raw_answer == CODE_ANSWER
    assert outcome.calls == 1 and len(server.requests) == 1 and server.requests[0].tools == ()
    assert [m["role"] for m in outcome.trajectory["messages"]] == ["user", "assistant"]
    assert outcome.trajectory["messages"][0]["content"] == "solve 1.1"
    assert outcome.usage.to_record() == {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
    assert outcome.trajectory["calls"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("answer,code", [(CODE_ANSWER, CODE), ("I ran out of", None)])
def test_naive_length_finish_is_truncated(tmp_path, answer, code):
    with ModelServer(Script(ModelReply(text=answer, finish_reason="length"))) as server:
        outcome = run(tmp_path, server, mode="naive")
    assert outcome.status == "truncated" and outcome.code == code and outcome.finish_reason == "length"


def test_naive_prose_is_no_code_without_reminder(tmp_path):
    with ModelServer(Script(ModelReply(text="You could write def f(x): return x"))) as server:
        outcome = run(tmp_path, server, mode="naive")
    assert outcome.status == "no_code" and outcome.code is None and len(server.requests) == 1


def test_naive_unfenced_code_defining_the_step_is_taken_as_code(tmp_path):
    answer = "import numpy as np\n\ndef f(x):\n    return np.sqrt(x)\n"
    with ModelServer(Script(ModelReply(text=answer))) as server:
        outcome = run(tmp_path, server, mode="naive")
    assert outcome.status == "ok" and outcome.code == "\n\ndef f(x):\n    return np.sqrt(x)\n"


@pytest.mark.parametrize("protocol", ["openai-chat", "openai-responses"])
def test_every_tool_call_of_a_response_is_answered_in_order(tmp_path, protocol):
    first = ModelReply(
        text=None,
        tool_calls=(interpreter_call("call_1", "print(6 * 7)"), interpreter_call("call_2", "print('second')")),
    )
    second = ModelReply(text=None, tool_calls=(interpreter_call("call_3", "raise ValueError('boom')"),))
    final = ModelReply(text=CODE_ANSWER)
    with ModelServer(Script(first, second, final)) as server:
        outcome = run(tmp_path, server, api_protocol=protocol)
    assert outcome.status == "ok" and outcome.code == CODE and outcome.calls == 3
    assert all(request.tools == ("code_interpreter",) for request in server.requests)
    tool_messages = [m for m in server.requests[2].messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_1", "call_2", "call_3"]
    assert "42" in json_str(tool_messages[0]["content"]) and "second" in json_str(tool_messages[1]["content"])
    assert "boom" in json_str(tool_messages[2]["content"])
    results = outcome.trajectory["tool_results"]
    assert [(r["call_id"], r["status"]) for r in results] == [("call_1", "ok"), ("call_2", "ok"), ("call_3", "error")]
    roles = [m["role"] for m in outcome.trajectory["messages"]]
    assert roles == ["user", "assistant", "tool", "tool", "assistant", "tool", "assistant"]


@pytest.mark.parametrize("protocol", ["openai-chat", "openai-responses"])
def test_answer_without_fence_gets_one_reminder(tmp_path, protocol):
    with ModelServer(Script(ModelReply(text="def g(x): return x"), ModelReply(text=CODE_ANSWER))) as server:
        outcome = run(tmp_path, server, api_protocol=protocol)
    assert outcome.status == "ok" and outcome.calls == 2
    assert server.requests[1].messages[-1] == {"role": "user", "content": REMINDER}
    assert server.requests[1].tools == ("code_interpreter",)


def test_a_lone_closing_fence_is_no_code_and_gets_the_reminder(tmp_path):
    # issue 21: code, then a lone ```: the extraction is empty, which is no code (never "" with status ok)
    lone_fence = "def f(x):\n    return x\n```"
    with ModelServer(Script(ModelReply(text=lone_fence), ModelReply(text=CODE_ANSWER))) as server:
        outcome = run(tmp_path, server)
    assert server.requests[1].messages[-1] == {"role": "user", "content": REMINDER}
    assert outcome.status == "ok" and outcome.code == CODE
    assert final_status(lone_fence, "stop", "f") == ("no_code", None)
    assert final_status("```python\n\n```", "stop", "f") == ("no_code", None)


def test_lone_surrogates_in_the_answer_and_the_tool_calls_become_valid_text(tmp_path):
    # issue 20: a lone surrogate travelled as a str until the first UTF-8 write (snippet file, generation file)
    hostile_call = ToolCallSpec("call_\ud800", "code_interpreter", '{"code": "print(\'\\ud800\')"}')
    answer = "```python\ndef f(x):\n    return '\ud800'\n```"
    with ModelServer(Script(ModelReply(tool_calls=(hostile_call,)), ModelReply(text=answer))) as server:
        outcome = run(tmp_path, server)
    assert outcome.status == "ok" and outcome.code == "\ndef f(x):\n    return '\ufffd'\n"
    assert outcome.trajectory["tool_results"][0]["output"] == "\ufffd\n"
    json.dumps(outcome.trajectory, ensure_ascii=False).encode("utf-8")  # every part of it can be written
    assert server.requests[1].messages[2]["tool_call_id"] == "call_\ufffd"


def test_tool_use_takes_unfenced_code_defining_the_step_without_a_reminder(tmp_path):
    with ModelServer(Script(ModelReply(text="def f(x):\n    return x\n"))) as server:
        outcome = run(tmp_path, server)
    assert outcome.status == "ok" and outcome.code == "def f(x):\n    return x\n" and len(server.requests) == 1


def test_only_one_reminder_then_no_code(tmp_path):
    with ModelServer(Script(ModelReply(text="still prose"))) as server:
        outcome = run(tmp_path, server)
    assert outcome.status == "no_code" and outcome.code is None and outcome.raw_answer == "still prose"
    assert len(server.requests) == 2
    assert sum(m["content"] == REMINDER for m in outcome.trajectory["messages"]) == 1


def tool_happy_responder(request):
    """Calls the tool whenever tools are offered; answers with code only when they are not."""
    if request.tools:
        return ModelReply(text=None, tool_calls=(interpreter_call(f"call_{request.index}", "print(1)"),))
    return ModelReply(text=CODE_ANSWER)


@pytest.mark.parametrize("protocol", ["openai-chat", "openai-responses"])
def test_loop_cap_then_one_final_call_without_tools(tmp_path, protocol):
    with ModelServer(tool_happy_responder) as server:
        outcome = run(tmp_path, server, api_protocol=protocol, tool_use_max_loops=3)
    assert outcome.status == "ok" and outcome.code == CODE
    assert [request.tools for request in server.requests] == [("code_interpreter",)] * 3 + [()]
    last = server.requests[-1].messages
    assert last[-1] == {"role": "user", "content": FINAL_ANSWER_REQUEST}
    assert [m["role"] for m in last[-3:]] == ["assistant", "tool", "user"]  # the 3rd call's tool call was answered
    assert len(outcome.trajectory["tool_results"]) == 3


def test_loop_cap_final_answer_without_code_is_no_code(tmp_path):
    def responder(request):
        if request.tools:
            return ModelReply(text=None, tool_calls=(interpreter_call(f"c{request.index}", "print(1)"),))
        return ModelReply(text="I could not finish.")

    with ModelServer(responder) as server:
        outcome = run(tmp_path, server, tool_use_max_loops=2)
    assert outcome.status == "no_code" and len(server.requests) == 3


def test_prose_at_the_cap_goes_straight_to_the_final_call(tmp_path):
    with ModelServer(Script(ModelReply(text="prose"), ModelReply(text=CODE_ANSWER))) as server:
        outcome = run(tmp_path, server, tool_use_max_loops=1)
    assert outcome.status == "ok" and len(server.requests) == 2
    assert server.requests[1].tools == ()
    assert server.requests[1].messages[-1]["content"] == FINAL_ANSWER_REQUEST
    assert all(m["content"] != REMINDER for m in server.requests[1].messages)


def test_failed_call_mid_loop_is_an_error_with_the_trajectory_so_far(tmp_path):
    first = ModelReply(text=None, tool_calls=(interpreter_call("call_1", "print(5)"),))
    with ModelServer(Script(first, ErrorReply(400, "context too long"))) as server:
        outcome = run(tmp_path, server)
    assert outcome.status == "error" and outcome.code is None
    assert "HTTP 400" in outcome.error and "context too long" in outcome.error
    assert outcome.failure is not None and not outcome.failure.transient
    assert [m["role"] for m in outcome.trajectory["messages"]] == ["user", "assistant", "tool"]
    assert len(outcome.trajectory["calls"]) == 2 and "HTTP 400" in outcome.trajectory["calls"][1]["error"]


def test_transient_failures_are_recorded_on_the_call(tmp_path):
    with ModelServer(Script(ErrorReply(429, "busy", {"Retry-After": "0"}), ModelReply(text=CODE_ANSWER))) as server:
        outcome = run(tmp_path, server, mode="naive")
    assert outcome.status == "ok"
    call = outcome.trajectory["calls"][0]
    assert call["retries"] == 1 and "HTTP 429" in call["retry_log"][0]["error"]


def test_a_forcing_tool_choice_applies_to_the_first_call_of_a_step_only(tmp_path):
    first = ModelReply(text=None, tool_calls=(interpreter_call("call_1", "print(1)"),))
    second = ModelReply(text=None, tool_calls=(interpreter_call("call_2", "print(2)"),))
    with ModelServer(Script(first, second, ModelReply(text=CODE_ANSWER))) as server:
        outcome = run(tmp_path, server, tool_choice="code_interpreter", tool_use_max_loops=2)
    assert outcome.status == "ok" and len(server.requests) == 3
    choices = [request.params.get("tool_choice") for request in server.requests]
    # later calls send none: the API's default with tools, auto
    assert choices == [{"type": "function", "function": {"name": "code_interpreter"}}, None, None]
    assert server.requests[2].tools == ()  # the final answer after the loop cap is asked without tools
    assistant_turns = [m for m in server.requests[2].messages if m["role"] == "assistant"]
    assert [m["content"] for m in assistant_turns] == ["", ""]  # tool-call turns are sent with empty content


@pytest.mark.parametrize(
    "choice,expected", [("auto", ["auto", "auto"]), ("none", ["none", "none"]), ("", [None, None])]
)
def test_a_non_forcing_tool_choice_goes_with_every_call_that_offers_tools(tmp_path, choice, expected):
    with ModelServer(Script(ModelReply(text="prose"), ModelReply(text=CODE_ANSWER))) as server:
        run(tmp_path, server, tool_choice=choice)
    assert [request.params.get("tool_choice") for request in server.requests] == expected


def test_a_prompt_too_long_for_the_context_is_a_final_context_exceeded_step(tmp_path):
    too_long = ErrorReply(
        400,
        "This model's maximum context length is 8192 tokens. However, you requested 9026 tokens",
        code="context_length_exceeded",
    )
    with ModelServer(Script(too_long)) as server:
        outcome = run(tmp_path, server, mode="naive")
    assert outcome.status == "context_exceeded" and outcome.code is None and len(server.requests) == 1
    assert "maximum context length is 8192" in outcome.error and outcome.failure.context_length


@pytest.mark.parametrize("protocol", ["openai-chat", "openai-responses"])
def test_a_tool_loop_records_every_turn_with_its_reasoning_in_order(tmp_path, protocol):
    from stages.records.generation import GeneratedStep
    from stages.storage.json_values import freeze_object

    first = ModelReply(
        text="Let me check.",
        tool_calls=(interpreter_call("call_1", "print(6 * 7)"),),
        reasoning="the square root of x\n\nbetter check numpy first",
        prompt_tokens=12,
        completion_tokens=4,
    )
    second = ModelReply(text="no code yet", reasoning="I forgot the fence")
    final = ModelReply(text=CODE_ANSWER)
    with ModelServer(Script(first, second, final)) as server:
        outcome = run(tmp_path, server, api_protocol=protocol)
    assert outcome.status == "ok" and outcome.trajectory["turns_recorded"] is True
    messages = outcome.trajectory["messages"]
    assert [m.get("reasoning") for m in messages if m["role"] == "assistant"] == [
        "the square root of x\n\nbetter check numpy first",
        "I forgot the fence",
        None,
    ]
    step = GeneratedStep.from_record(
        freeze_object({"step_id": "1.1", "status": outcome.status, "trajectory": outcome.trajectory, "latency_s": 0.0})
    )
    assert step.turns is not None
    assert [(turn.role, turn.text) for turn in step.turns] == [
        ("user", "solve 1.1"),
        ("assistant", "Let me check."),
        ("tool", messages[2]["content"]),
        ("assistant", "no code yet"),
        ("user", REMINDER),
        ("assistant", CODE_ANSWER),
    ]
    assistant = step.turns[1]
    assert assistant.reasoning == "the square root of x\n\nbetter check numpy first"
    assert [(call.call_id, call.code) for call in assistant.tool_calls] == [("call_1", "print(6 * 7)")]
    assert assistant.call is not None and assistant.call.startswith("12 in / 4 out tokens")
    tool = step.turns[2].tool
    assert tool is not None and tool.status == "ok" and "42" in (step.turns[2].text or "")


def test_a_trajectory_without_the_marker_has_no_turns(tmp_path):
    from stages.records.generation import GeneratedStep
    from stages.storage.json_values import freeze_object

    trajectory = {"messages": [{"role": "user", "content": "p"}, {"role": "assistant", "content": "a"}], "calls": []}
    step = GeneratedStep.from_record(
        freeze_object({"step_id": "1.1", "status": "ok", "trajectory": trajectory, "latency_s": 0.0})
    )
    assert step.turns is None and step.prompt == "p"


def forty_calls(code: str) -> ModelReply:
    return ModelReply(text=None, tool_calls=tuple(interpreter_call(f"call_{n}", code) for n in range(40)))


def tool_messages_of(request) -> list[dict]:
    return [m for m in request.messages if m["role"] == "tool"]


@pytest.mark.parametrize("protocol", ["openai-chat", "openai-responses"])
def test_a_reply_with_forty_tool_calls_runs_at_most_the_stated_number(tmp_path, protocol):
    with ModelServer(Script(forty_calls("print(6 * 7)"), ModelReply(text=CODE_ANSWER))) as server:
        outcome = run(tmp_path, server, api_protocol=protocol)
    assert outcome.status == "ok" and outcome.calls == 2
    answered = tool_messages_of(server.requests[1])
    assert [m["tool_call_id"] for m in answered] == [f"call_{n}" for n in range(40)]  # every call is answered
    ran = outcome.trajectory["tool_results"]
    assert [r["call_id"] for r in ran] == [f"call_{n}" for n in range(MAX_TOOL_CALLS_RUN_PER_REPLY)]
    assert all(r["status"] == "ok" and "42" in r["output"] for r in ran)
    not_run = outcome.trajectory["tool_calls_not_run"]
    assert [r["call_id"] for r in not_run] == [f"call_{n}" for n in range(MAX_TOOL_CALLS_RUN_PER_REPLY, 40)]
    reason = f"at most {MAX_TOOL_CALLS_RUN_PER_REPLY} tool calls of one reply are run, and this reply made 40"
    assert all(reason in r["reason"] for r in not_run)
    assert all(reason in json_str(m["content"]) for m in answered[MAX_TOOL_CALLS_RUN_PER_REPLY:])


def test_a_step_s_snippets_stop_at_its_stated_time_budget(tmp_path):
    """40 endless snippets at code_timeout_seconds=2 with tool_use_max_loops=1: the step's budget (1 x 2 s) lets
    one run, not 40 (which took 81 s)."""
    assert (
        tool_time_budget_seconds(make_settings(tmp_path, _no_server(), code_timeout_seconds=2, tool_use_max_loops=1))
        == 2
    )
    started = time.monotonic()
    with ModelServer(Script(forty_calls("while True: pass"), ModelReply(text=CODE_ANSWER))) as server:
        outcome = run(tmp_path, server, code_timeout_seconds=2, tool_use_max_loops=1)
    elapsed = time.monotonic() - started
    assert outcome.status == "ok" and elapsed < 20
    assert [r["status"] for r in outcome.trajectory["tool_results"]] == ["timeout"]
    not_run = outcome.trajectory["tool_calls_not_run"]
    assert len(not_run) == 39 and "its budget of 2 s (tool_use_max_loops x" in not_run[0]["reason"]
    assert len(tool_messages_of(server.requests[1])) == 40


def test_quick_snippets_of_one_reply_all_run_within_a_one_loop_budget(tmp_path):
    with ModelServer(Script(forty_calls("print(1)"), ModelReply(text=CODE_ANSWER))) as server:
        outcome = run(tmp_path, server, code_timeout_seconds=20, tool_use_max_loops=1)
    assert [r["status"] for r in outcome.trajectory["tool_results"]] == ["ok"] * MAX_TOOL_CALLS_RUN_PER_REPLY


def test_the_time_budget_of_sandbox_snippets_counts_every_attempt(tmp_path):
    settings = make_settings(
        tmp_path,
        _no_server(),
        sandbox_url="http://127.0.0.1:9",
        code_timeout_seconds=10,
        sandbox_api_timeout_seconds=5,
        sandbox_max_retries=2,
        sandbox_retry_delay_seconds=1,
        tool_use_max_loops=3,
    )
    assert tool_time_budget_seconds(settings) == 3 * (3 * 15 + 2 * 1)


class _NoServer:
    base_url = "http://127.0.0.1:9/v1"


def _no_server():
    return _NoServer()
