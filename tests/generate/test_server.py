"""The local OpenAI-compatible server, exercised with the real `openai` client over loopback."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import openai
import pytest
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam
from openai.types.responses import ResponseInputParam

from stages.generate.server import (
    ErrorReply,
    ModelReply,
    ModelRequest,
    ModelServer,
    RawReply,
    Reply,
    StallReply,
    ToolCallSpec,
)
from tests.generate.openai_values import function_calls, item_sent_back, sent_back

CODE_TOOL_CHAT: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {
        "name": "code_interpreter",
        "description": "run python",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
    },
}
# The Responses API tool as the pipeline sends it (stages.generate.tools.tool_schemas): without the `strict` key
# the SDK's FunctionToolParam requires, so it goes in the request body as the JSON it is (`extra_body`).
CODE_TOOL_RESPONSES = {
    "type": "function",
    "name": "code_interpreter",
    "description": "run python",
    "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
}


def post_raw(url: str, body: bytes) -> tuple[int, dict]:
    """POST bytes with urllib; returns the status and the decoded JSON body (errors included)."""
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def client_for(server: ModelServer, **options) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0, **options)


def test_chat_text_reply_and_usage() -> None:
    reply = ModelReply(text="```python\nx = 1\n```", prompt_tokens=11, completion_tokens=7)
    with ModelServer(lambda request: reply) as server:
        completion = client_for(server).chat.completions.create(
            model="m1",
            messages=[{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"}],
            temperature=0.25,
            max_tokens=99,
            extra_headers={"X-SciCode-Step": "10.3"},
        )
    choice = completion.choices[0]
    assert choice.message.content == "```python\nx = 1\n```"
    assert choice.finish_reason == "stop"
    assert choice.message.tool_calls is None
    assert completion.model == "m1"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens, completion.usage.total_tokens) == (
        11,
        7,
        18,
    )
    [request] = server.requests
    assert request.protocol == "openai-chat"
    assert request.messages == ({"role": "system", "content": "sys"}, {"role": "user", "content": "hello"})
    assert request.tools == ()
    assert request.params == {"temperature": 0.25, "max_tokens": 99}
    assert request.headers["x-scicode-step"] == "10.3"
    assert request.index == 0


def test_chat_several_tool_calls_and_tool_results_normalized() -> None:
    calls = (
        ToolCallSpec(id="call_a", name="code_interpreter", arguments=json.dumps({"code": "print(1)"})),
        ToolCallSpec(id="call_b", name="code_interpreter", arguments=json.dumps({"code": "print(2)"})),
    )
    replies = iter([ModelReply(tool_calls=calls, prompt_tokens=5, completion_tokens=3), ModelReply(text="done")])
    with ModelServer(lambda request: next(replies)) as server:
        client = client_for(server)
        first = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "go"}], tools=[CODE_TOOL_CHAT]
        )
        message = first.choices[0].message
        assert first.choices[0].finish_reason == "tool_calls"
        assert [(c.id, c.type, c.function.name, json.loads(c.function.arguments)) for c in function_calls(message)] == [
            ("call_a", "function", "code_interpreter", {"code": "print(1)"}),
            ("call_b", "function", "code_interpreter", {"code": "print(2)"}),
        ]
        history: list[ChatCompletionMessageParam] = [
            {"role": "user", "content": "go"},
            sent_back(message),
            {"role": "tool", "tool_call_id": "call_a", "content": "1\n"},
            {"role": "tool", "tool_call_id": "call_b", "content": [{"type": "text", "text": "2\n"}]},
        ]
        second = client.chat.completions.create(model="m", messages=history, tools=[CODE_TOOL_CHAT])
    assert second.choices[0].message.content == "done"
    first_request, second_request = server.requests
    assert first_request.tools == ("code_interpreter",)
    assert second_request.index == 1
    assert second_request.messages[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_a", "name": "code_interpreter", "arguments": '{"code": "print(1)"}'},
            {"id": "call_b", "name": "code_interpreter", "arguments": '{"code": "print(2)"}'},
        ],
    }
    assert second_request.messages[2:] == (
        {"role": "tool", "content": "1\n", "tool_call_id": "call_a"},
        {"role": "tool", "content": "2\n", "tool_call_id": "call_b"},
    )


def test_chat_length_finish_reason() -> None:
    with ModelServer(lambda request: ModelReply(text="partial", finish_reason="length")) as server:
        completion = client_for(server).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert completion.choices[0].finish_reason == "length"


def test_responses_text_reply_instructions_and_usage() -> None:
    with ModelServer(lambda request: ModelReply(text="answer", prompt_tokens=20, completion_tokens=4)) as server:
        response = client_for(server).responses.create(
            model="r1", instructions="be brief", input="question?", max_output_tokens=50
        )
    assert response.output_text == "answer"
    assert response.status == "completed"
    assert response.object == "response"
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.total_tokens) == (20, 4, 24)
    [request] = server.requests
    assert request.protocol == "openai-responses"
    assert request.messages == ({"role": "system", "content": "be brief"}, {"role": "user", "content": "question?"})
    assert request.params == {"max_output_tokens": 50}


def test_responses_length_is_incomplete() -> None:
    with ModelServer(lambda request: ModelReply(text="cut", finish_reason="length")) as server:
        response = client_for(server).responses.create(model="r", input="q")
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"


def test_responses_function_calls_and_output_round_trip() -> None:
    calls = (
        ToolCallSpec(id="call_1", name="code_interpreter", arguments='{"code": "print(6*7)"}'),
        ToolCallSpec(id="call_2", name="code_interpreter", arguments='{"code": "print(1)"}'),
    )
    replies = iter([ModelReply(text="let me check", tool_calls=calls), ModelReply(text="42")])
    with ModelServer(lambda request: next(replies)) as server:
        client = client_for(server)
        first = client.responses.create(
            model="r", input=[{"role": "user", "content": "compute"}], extra_body={"tools": [CODE_TOOL_RESPONSES]}
        )
        function_calls = [item for item in first.output if item.type == "function_call"]
        assert first.output_text == "let me check"
        assert [(c.call_id, c.name, json.loads(c.arguments)) for c in function_calls] == [
            ("call_1", "code_interpreter", {"code": "print(6*7)"}),
            ("call_2", "code_interpreter", {"code": "print(1)"}),
        ]
        follow_up: ResponseInputParam = [{"role": "user", "content": "compute"}]
        follow_up += [item_sent_back(item) for item in first.output]
        follow_up += [
            {"type": "function_call_output", "call_id": "call_1", "output": "42\n"},
            {"type": "function_call_output", "call_id": "call_2", "output": "1\n"},
        ]
        second = client.responses.create(model="r", input=follow_up, extra_body={"tools": [CODE_TOOL_RESPONSES]})
    assert second.output_text == "42"
    second_request = server.requests[1]
    assert second_request.tools == ("code_interpreter",)
    assert second_request.messages == (
        {"role": "user", "content": "compute"},
        {
            "role": "assistant",
            "content": "let me check",
            "tool_calls": [
                {"id": "call_1", "name": "code_interpreter", "arguments": '{"code": "print(6*7)"}'},
                {"id": "call_2", "name": "code_interpreter", "arguments": '{"code": "print(1)"}'},
            ],
        },
        {"role": "tool", "content": "42\n", "tool_call_id": "call_1"},
        {"role": "tool", "content": "1\n", "tool_call_id": "call_2"},
    )


@pytest.mark.parametrize(
    ("status", "exception", "code", "error_type"),
    [
        (400, openai.BadRequestError, None, "invalid_request_error"),
        (401, openai.AuthenticationError, None, "authentication_error"),
        (404, openai.NotFoundError, "model_not_found", "not_found_error"),
        (409, openai.ConflictError, None, "conflict_error"),
        (429, openai.RateLimitError, "rate_limit_exceeded", "rate_limit_error"),
        (500, openai.InternalServerError, None, "server_error"),
        (503, openai.InternalServerError, None, "server_error"),
    ],
)
def test_error_statuses_reach_client_as_openai_exceptions(
    status: int, exception: type[openai.APIStatusError], code: str | None, error_type: str
) -> None:
    reply = ErrorReply(status, message=f"scripted {status}", headers={"Retry-After": "1"}, code=code)
    with ModelServer(lambda request: reply) as server:
        with pytest.raises(exception) as raised:
            client_for(server).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    error = raised.value
    assert error.status_code == status
    assert error.response.headers["retry-after"] == "1"
    assert isinstance(error.body, dict)
    assert error.body["message"] == f"scripted {status}"
    assert error.code == code
    assert error.type == error_type


def test_error_status_on_responses_protocol() -> None:
    with ModelServer(lambda request: ErrorReply(404, "no such model", code="model_not_found")) as server:
        with pytest.raises(openai.NotFoundError) as raised:
            client_for(server).responses.create(model="nope", input="q")
    assert raised.value.code == "model_not_found"


def test_raw_malformed_body_fails_client_parsing() -> None:
    with ModelServer(lambda request: RawReply(200, b"{not json")) as server:
        with pytest.raises(json.JSONDecodeError):  # the openai client does not wrap this one
            client_for(server).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])


def test_stall_reply_makes_client_time_out_and_server_keeps_working() -> None:
    stall = StallReply(seconds=1.5, then=ModelReply(text="late"))
    answers: Iterator[Reply] = iter([stall, ModelReply(text="on time")])
    with ModelServer(lambda request: next(answers)) as server:
        client = client_for(server, timeout=0.3)
        started = time.monotonic()
        with pytest.raises(openai.APITimeoutError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        assert time.monotonic() - started < 1.4
        completion = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert completion.choices[0].message.content == "on time"


def test_responder_exception_becomes_server_error() -> None:
    def broken(request: ModelRequest) -> ModelReply:
        raise KeyError("boom")

    with ModelServer(broken) as server:
        with pytest.raises(openai.InternalServerError) as raised:
            client_for(server).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert isinstance(raised.value.body, dict)
    assert "KeyError" in raised.value.body["message"]


def test_invalid_json_request_is_400_and_not_logged() -> None:
    with ModelServer(lambda request: ModelReply(text="x")) as server:
        status, body = post_raw(server.base_url + "/chat/completions", b"{oops")
        assert status == 400
        assert body["error"]["type"] == "invalid_request_error"
        status, body = post_raw(server.base_url + "/chat/completions", json.dumps({"messages": []}).encode())
        assert status == 400
        assert "'model' is required" in body["error"]["message"]
        status, body = post_raw(server.base_url + "/embeddings", b"{}")
        assert status == 404
        broken_call = {
            "model": "m",
            "messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function"}]}],
        }
        status, body = post_raw(server.base_url + "/chat/completions", json.dumps(broken_call).encode())
        assert status == 400 and "malformed openai-chat request" in body["error"]["message"]
        status, body = post_raw(server.base_url + "/responses", json.dumps({"model": "m", "input": 3}).encode())
        assert status == 400 and "'input' must be" in body["error"]["message"]
    assert server.requests == []


def test_models_endpoint_lists_configured_models() -> None:
    with ModelServer(lambda request: ModelReply(text="x"), models=("gold",)) as server:
        listed = client_for(server).models.list()
    assert [model.id for model in listed.data] == ["gold"]


def test_concurrent_requests_are_all_logged_with_distinct_indexes() -> None:
    def slow_echo(request: ModelRequest) -> ModelReply:
        time.sleep(0.05)
        return ModelReply(text=request.messages[-1]["content"])

    results: dict[int, str | None] = {}
    with ModelServer(slow_echo) as server:
        client = client_for(server)

        def ask(number: int) -> None:
            completion = client.chat.completions.create(model="m", messages=[{"role": "user", "content": str(number)}])
            results[number] = completion.choices[0].message.content

        threads = [threading.Thread(target=ask, args=(n,)) for n in range(12)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
    assert results == {n: str(n) for n in range(12)}
    assert sorted(request.index for request in server.requests) == list(range(12))
    assert elapsed < 0.05 * 12  # served in parallel, not one after another


def test_stop_frees_the_port() -> None:
    server = ModelServer(lambda request: ModelReply(text="x")).start()
    url = server.base_url + "/models"
    server.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=2)
