"""Built-in models (gold, replay) through the local endpoint, driven by the real `openai` client."""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionFunctionToolParam, ChatCompletionMessageParam
from openai.types.responses import ResponseInputParam

from stages.benchmark.problems import load_problems
from stages.benchmark.protocol import extract_fenced_code
from stages.config.settings import ConfigError, Settings, load_settings
from stages.generate.builtin import (
    LATENCY_VARIABLE,
    STEP_HEADER,
    BuiltinModelError,
    BuiltinModelService,
    builtin_responder,
    is_builtin_model,
    no_recorded_answer,
)
from tests.generate.openai_values import function_calls, item_sent_back, sent_back

TOOLS_CHAT: list[ChatCompletionFunctionToolParam] = [
    {
        "type": "function",
        "function": {
            "name": "code_interpreter",
            "description": "run python",
            "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
        },
    }
]
# The Responses API tool as the pipeline sends it: without the `strict` key the SDK's FunctionToolParam requires, so
# it goes in the request body as the JSON it is (`extra_body`).
TOOLS_RESPONSES = [{"type": "function", **TOOLS_CHAT[0]["function"]}]


@pytest.fixture
def service():
    yield BuiltinModelService
    BuiltinModelService.stop_all()


def gold_settings(data_dir: Path, **extra: str) -> Settings:
    return load_settings({"data_dir": str(data_dir), **extra}, cwd=data_dir.parent)


def reference(data_dir: Path, step_id: str) -> str:
    settings = gold_settings(data_dir)
    for problem in load_problems(settings.data_paths, "validation"):
        for step in problem.steps:
            if step.step_id == step_id:
                assert step.ground_truth_code is not None, f"step {step_id} has no reference code"
                return step.ground_truth_code
    raise AssertionError(f"no step {step_id}")


def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)


def ask_chat(
    base_url: str,
    step_id: str | None,
    messages: Sequence[ChatCompletionMessageParam],
    model: str = "gold",
    tools: list[ChatCompletionFunctionToolParam] | None = None,
) -> ChatCompletion:
    headers = {STEP_HEADER: step_id} if step_id else {}
    chat = client(base_url).chat.completions
    if tools:
        return chat.create(model=model, messages=messages, extra_headers=headers, tools=tools)
    return chat.create(model=model, messages=messages, extra_headers=headers)


def code_of(answer: str | None) -> str:
    """The fenced code of an answer, which must have some."""
    assert answer is not None
    code = extract_fenced_code(answer)
    assert code is not None, answer
    return code


def test_is_builtin_model() -> None:
    assert is_builtin_model("gold")
    assert is_builtin_model("replay:answers.json")
    assert not is_builtin_model("replay:")
    assert not is_builtin_model("gpt-4o-mini")
    assert not is_builtin_model("golden")


def test_builtin_error_is_a_config_error() -> None:
    assert issubclass(BuiltinModelError, ConfigError)


def test_gold_naive_answers_fenced_reference_code(staged_data_dir: Path, service) -> None:
    base_url = service.base_url_for(gold_settings(staged_data_dir))
    completion = ask_chat(base_url, "10.3", [{"role": "user", "content": "write step 10.3"}])
    answer = completion.choices[0].message.content
    assert answer is not None and answer.startswith("```python\n")
    assert code_of(answer).strip() == reference(staged_data_dir, "10.3").strip()
    assert completion.choices[0].message.tool_calls is None
    assert completion.usage is not None
    assert completion.usage.prompt_tokens > 0 and completion.usage.completion_tokens > 0


def test_gold_tool_use_runs_code_once_then_submits(staged_data_dir: Path, service) -> None:
    base_url = service.base_url_for(gold_settings(staged_data_dir))
    history: list[ChatCompletionMessageParam] = [{"role": "user", "content": "write step 10.1"}]
    first = ask_chat(base_url, "10.1", history, tools=TOOLS_CHAT)
    [call] = function_calls(first.choices[0].message)
    assert first.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "code_interpreter"
    assert json.loads(call.function.arguments) == {"code": reference(staged_data_dir, "10.1")}
    history += [
        sent_back(first.choices[0].message),
        {"role": "tool", "tool_call_id": call.id, "content": "(no output)"},
    ]
    second = ask_chat(base_url, "10.1", history, tools=TOOLS_CHAT)
    assert second.choices[0].message.tool_calls is None
    assert code_of(second.choices[0].message.content).strip() == reference(staged_data_dir, "10.1").strip()


def test_gold_tool_use_tool_results_of_an_earlier_step_do_not_count(staged_data_dir: Path, service) -> None:
    base_url = service.base_url_for(gold_settings(staged_data_dir))
    history: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "step 10.1"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "code_interpreter", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "assistant", "content": "```python\npass\n```"},
        {"role": "user", "content": "step 10.2"},
    ]
    reply = ask_chat(base_url, "10.2", history, tools=TOOLS_CHAT)
    assert reply.choices[0].message.tool_calls is not None


def test_gold_tool_use_over_responses_protocol(staged_data_dir: Path, service) -> None:
    base_url = service.base_url_for(gold_settings(staged_data_dir, api_protocol="openai-responses"))
    api = client(base_url)
    headers = {STEP_HEADER: "10.2"}
    first = api.responses.create(
        model="gold", input="step 10.2", extra_body={"tools": TOOLS_RESPONSES}, extra_headers=headers
    )
    [call] = [item for item in first.output if item.type == "function_call"]
    assert json.loads(call.arguments)["code"] == reference(staged_data_dir, "10.2")
    follow_up: ResponseInputParam = [
        {"role": "user", "content": "step 10.2"},
        item_sent_back(call),
        {"type": "function_call_output", "call_id": call.call_id, "output": ""},
    ]
    second = api.responses.create(
        model="gold", input=follow_up, extra_body={"tools": TOOLS_RESPONSES}, extra_headers=headers
    )
    assert code_of(second.output_text).strip() == reference(staged_data_dir, "10.2").strip()


def test_gold_without_step_header_is_a_clear_400(staged_data_dir: Path, service) -> None:
    base_url = service.base_url_for(gold_settings(staged_data_dir))
    with pytest.raises(openai.BadRequestError) as raised:
        ask_chat(base_url, None, [{"role": "user", "content": "x"}])
    assert isinstance(raised.value.body, dict)
    assert STEP_HEADER in raised.value.body["message"]


def test_gold_step_without_reference_code_is_an_error_naming_the_problem(staged_data_dir: Path, service) -> None:
    base_url = service.base_url_for(gold_settings(staged_data_dir))
    with pytest.raises(openai.BadRequestError) as raised:
        ask_chat(base_url, "77.1", [{"role": "user", "content": "x"}])
    assert raised.value.code == "no_reference_code"
    assert isinstance(raised.value.body, dict)
    assert "problem 77" in raised.value.body["message"]


def test_gold_for_a_split_without_reference_code_refuses_to_start(staged_data_dir: Path, service) -> None:
    settings = dataclasses.replace(
        gold_settings(staged_data_dir), split="test"
    )  # config refuses it; check the service too
    with pytest.raises(BuiltinModelError) as raised:
        service.base_url_for(settings)
    message = str(raised.value)
    assert "\n" not in message and "problem 77" in message and "validation" in message


def test_gold_without_data_is_a_clear_error(tmp_path: Path, service) -> None:
    with pytest.raises(BuiltinModelError, match="cannot load the problems"):
        builtin_responder(gold_settings(tmp_path / "nowhere"))


def test_wrong_model_name_is_model_not_found(staged_data_dir: Path, service) -> None:
    base_url = service.base_url_for(gold_settings(staged_data_dir))
    with pytest.raises(openai.NotFoundError) as raised:
        ask_chat(base_url, "10.1", [{"role": "user", "content": "x"}], model="gpt-x")
    assert raised.value.code == "model_not_found"


def write_replay(folder: Path, content) -> Path:
    path = folder / "answers.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


def test_replay_answers_recorded_text_and_no_code_when_missing(staged_data_dir: Path, service) -> None:
    recorded = "Here it is:\n```python\ndef f(x):\n    return 2 * x\n```\n"
    path = write_replay(staged_data_dir.parent, {"10.1": recorded})
    model = f"replay:{path}"
    settings = load_settings({"data_dir": str(staged_data_dir), "model": model, "split": "validation"})
    base_url = service.base_url_for(settings)
    hit = ask_chat(base_url, "10.1", [{"role": "user", "content": "x"}], model=model, tools=TOOLS_CHAT)
    assert hit.choices[0].message.content == recorded
    assert hit.choices[0].message.tool_calls is None  # replay answers directly, even in tool_use mode
    miss = ask_chat(base_url, "10.2", [{"role": "user", "content": "x"}], model=model)
    assert miss.choices[0].message.content == no_recorded_answer("10.2")
    assert extract_fenced_code(miss.choices[0].message.content) is None


def test_replay_relative_file_resolves_against_working_dir(staged_data_dir: Path, service, monkeypatch) -> None:
    write_replay(staged_data_dir.parent, {"10.1": "```python\nx = 1\n```"})
    monkeypatch.chdir(staged_data_dir.parent)
    settings = load_settings({"data_dir": str(staged_data_dir), "model": "replay:answers.json", "split": "validation"})
    base_url = service.base_url_for(settings)
    reply = ask_chat(base_url, "10.1", [{"role": "user", "content": "x"}], model="replay:answers.json")
    assert reply.choices[0].message.content == "```python\nx = 1\n```"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "no such file"),
        ("{not json", "not readable JSON"),
        ("[" * 100_000, "not readable JSON (RecursionError)"),
        (["a", "b"], "expected a JSON object"),
        ({"10.1": 3}, "step '10.1' is not a string"),
    ],
)
def test_replay_file_errors_name_the_file(tmp_path: Path, content, expected: str) -> None:
    path = tmp_path / "answers.json" if content is None else write_replay(tmp_path, content)
    settings = load_settings({"data_dir": str(tmp_path), "model": f"replay:{path}", "split": "validation"})
    with pytest.raises(BuiltinModelError) as raised:
        builtin_responder(settings)
    message = str(raised.value)
    assert str(path) in message and expected in message and "\n" not in message


def test_service_starts_one_server_per_responder_identity(staged_data_dir: Path, tmp_path: Path, service) -> None:
    settings = gold_settings(staged_data_dir)
    urls: list[str] = []
    threads = [threading.Thread(target=lambda: urls.append(service.base_url_for(settings))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(urls)) == 1
    other_data = tmp_path / "other" / "data"
    other_data.parent.mkdir()
    shutil.copytree(staged_data_dir, other_data)
    assert service.base_url_for(gold_settings(other_data)) != urls[0]
    assert service.base_url_for(settings) == urls[0]
    service.stop_all()
    with pytest.raises(openai.APIConnectionError):
        ask_chat(urls[0], "10.1", [{"role": "user", "content": "x"}])
    restarted = service.base_url_for(settings)
    assert ask_chat(restarted, "10.1", [{"role": "user", "content": "x"}]).choices[0].message.content


def test_edited_replay_file_gets_a_fresh_responder(staged_data_dir: Path, service) -> None:
    path = write_replay(staged_data_dir.parent, {"10.1": "first"})
    settings = load_settings({"data_dir": str(staged_data_dir), "model": f"replay:{path}", "split": "validation"})
    first_url = service.base_url_for(settings)
    assert service.base_url_for(settings) == first_url
    write_replay(staged_data_dir.parent, {"10.1": "second, longer"})
    second_url = service.base_url_for(settings)
    assert second_url != first_url
    reply = ask_chat(second_url, "10.1", [{"role": "user", "content": "x"}], model=f"replay:{path}")
    assert reply.choices[0].message.content == "second, longer"


def test_latency_variable_slows_every_answer(staged_data_dir: Path, service, monkeypatch) -> None:
    monkeypatch.setenv(LATENCY_VARIABLE, "0.6")
    base_url = service.base_url_for(gold_settings(staged_data_dir))
    for step_id in ("10.1", "10.2"):
        started = time.monotonic()
        completion = ask_chat(base_url, step_id, [{"role": "user", "content": f"write step {step_id}"}])
        assert time.monotonic() - started >= 0.6
        assert code_of(completion.choices[0].message.content).strip() == reference(staged_data_dir, step_id).strip()


@pytest.mark.parametrize("value", ["slow", "-1", "1e9", "nan"])
def test_invalid_latency_is_one_line_naming_the_variable(
    staged_data_dir: Path, service, monkeypatch, value: str
) -> None:
    monkeypatch.setenv(LATENCY_VARIABLE, value)
    expected = f"invalid {LATENCY_VARIABLE}={value}: expected seconds between 0 and 600"
    with pytest.raises(BuiltinModelError, match=expected):
        service.base_url_for(gold_settings(staged_data_dir))
